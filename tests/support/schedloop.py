"""A tiny fake-model engine loop for policy tests (vLLM's step_with_batch_queue order).

Depth 1 is EngineCore.step(); depth 2 is the batch queue, which is also SGLang's overlap loop:
schedule k, launch k, process k-1. The fake model samples one token per request whose entry is
not a prefill chunk (decided at launch, as the model runner does), at output index
context_len + num_tokens - prompt_len: EOS at the index the test gives, else 1000 + index.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from schedsim.policies import Request, RequestOutput, RequestStatus, StepPlan, StepResult

EOS = 2


def make_request(rid: str, prompt_len: int, max_tokens: int, arrival: float = 0.0, **kw) -> Request:
    """A request with the fake model's EOS id."""
    return Request(
        request_id=rid,
        arrival_time=arrival,
        prompt_len=prompt_len,
        max_tokens=max_tokens,
        eos_token_id=EOS,
        **kw,
    )


def running_requests(computed: list[int]) -> list[Request]:
    """Requests holding these computed-token counts, as a fast-forward stretch finds them."""
    reqs = [make_request(f"r{j}", c, 16) for j, c in enumerate(computed)]
    for r, c in zip(reqs, computed, strict=True):
        r.num_computed_tokens = c
    return reqs


@dataclass
class Trace:
    """What a run produced: every plan in schedule order, outputs per request, finish statuses."""

    plans: list[StepPlan] = field(default_factory=list)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    finish: dict[str, object] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    def sched(self) -> list[dict[str, int]]:
        """num_scheduled_tokens of every plan."""
        return [dict(p.num_scheduled_tokens) for p in self.plans]


def _launch(policy, plan: StepPlan, prompt: dict[str, int], eos_at: dict[str, int]) -> StepResult:
    """Sample now (the result is only looked at when the step is processed)."""
    sampled = {}
    for rid, n in plan.num_scheduled_tokens.items():
        req = policy.requests.get(rid)
        if req is None or req.is_prefill_chunk:
            continue
        idx = plan.context_lens[rid] + n - prompt[rid]
        sampled[rid] = [EOS if eos_at.get(rid) == idx else 1000 + idx]
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled)


def run(
    policy,
    requests: list[Request],
    eos_at: dict[str, int] | None = None,
    arrivals: dict[int, list[Request]] | None = None,
    max_iters: int = 2000,
    check: bool = True,
    observe=None,
    aborts: dict[int, list[str]] | None = None,
    depth: int | None = None,
) -> Trace:
    """Drive the policy to completion; `arrivals[i]` are added before loop iteration i.

    `observe(policy, plan)` is called right after each schedule (to read policy state then);
    `aborts[i]` are aborted before loop iteration i (while steps may be in flight); `depth`
    overrides the batch-queue depth (default: the policy's max_concurrent_batches).
    """
    aborts = aborts or {}
    eos_at = eos_at or {}
    arrivals = dict(arrivals or {})
    prompt = {r.request_id: r.prompt_len for r in requests}
    for reqs in arrivals.values():
        prompt.update({r.request_id: r.prompt_len for r in reqs})
    for r in requests:
        policy.add_request(r)
    depth = depth or policy.max_concurrent_batches
    queue: deque[tuple[StepPlan, StepResult]] = deque()
    trace = Trace()
    for it in range(max_iters):
        for r in arrivals.pop(it, []):
            policy.add_request(r)
        if it in aborts:
            for req in policy.abort_requests(aborts[it]):
                trace.finish[req.request_id] = req.status
        if not policy.has_requests() and not queue and not arrivals:
            return trace
        if policy.has_requests():
            plan = policy.schedule()
            trace.plans.append(plan)
            trace.events.append(f"schedule {plan.step_id}")
            if observe is not None:
                observe(policy, plan)
            queue.appendleft((plan, _launch(policy, plan, prompt, eos_at)))
            if check:
                policy.check_invariants()
            if len(queue) < depth and (not plan.is_empty or policy.has_requests()):
                continue
        elif not queue:
            continue
        plan, result = queue.pop()
        trace.events.append(f"update {plan.step_id}")
        _collect(trace, policy.update_from_output(plan, result))
        if check:
            policy.check_invariants()
    raise AssertionError(f"policy did not finish within {max_iters} iterations")


def _collect(trace: Trace, outputs: list[RequestOutput]) -> None:
    """Accumulate delivered tokens and finishes."""
    for out in outputs:
        trace.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
        if out.finish_reason is not None:
            assert out.request_id not in trace.finish, f"{out.request_id} finished twice"
            trace.finish[out.request_id] = out.finish_reason


def check_run(
    make,
    spec: list[tuple[int, int, int | None, int]],
    arrivals_at: list[int],
    cap=lambda prompt_len, max_tokens: max_tokens,
    depth: int | None = None,
) -> Trace:
    """Run a workload twice; assert exact tokens, finishes, and identical plans (determinism).

    spec: (prompt_len, max_tokens, eos_index or None, priority) per request; `cap` is the output
    cap the policy enforces (max_tokens clipped to max_model_len or to the pool).
    """
    traces = []
    for _ in range(2):
        reqs = [make_request(f"r{i}", p, m, priority=pr) for i, (p, m, _, pr) in enumerate(spec)]
        eos = {f"r{i}": e for i, (_, _, e, _) in enumerate(spec) if e is not None}
        arrivals: dict[int, list[Request]] = {}
        for req, at in zip(reqs, arrivals_at, strict=True):
            arrivals.setdefault(at, []).append(req)
        first = arrivals.pop(0, [])
        traces.append(run(make(), first, eos_at=eos, arrivals=arrivals, max_iters=5000, depth=depth))
    a, b = traces
    assert [
        (p.num_scheduled_tokens, p.context_lens, p.new_req_ids, p.preempted_req_ids) for p in a.plans
    ] == [(p.num_scheduled_tokens, p.context_lens, p.new_req_ids, p.preempted_req_ids) for p in b.plans]
    for i, (p, m0, e, _) in enumerate(spec):
        rid = f"r{i}"
        m = cap(p, m0)
        n = m if e is None or e >= m else e + 1
        expected = [1000 + k for k in range(n)]
        if e is not None and e < m:
            expected[-1] = EOS
        assert a.tokens.get(rid) == expected, rid
        stopped = e is not None and e < m  # an EOS as the last allowed token is a stop
        want = RequestStatus.FINISHED_STOPPED if stopped else RequestStatus.FINISHED_LENGTH_CAPPED
        assert a.finish[rid] == want, (rid, a.finish[rid])
    return a
