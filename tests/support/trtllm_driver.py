"""A tiny synchronous engine loop with a deterministic oracle, for driving TrtllmPolicy in tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st
from schedsim.policies import Request, StepPlan, StepResult
from schedsim.policies.trtllm import TrtllmPolicy

EOS = 2
TOKEN = 7


@dataclass
class RunLog:
    """What a run did, step by step."""

    plans: list[StepPlan] = field(default_factory=list)
    finished: dict[str, object] = field(default_factory=dict)
    max_running: int = 0
    first_token_step: dict[str, int] = field(default_factory=dict)
    delivered: list[dict[str, int]] = field(default_factory=list)


def make_request(
    rid: str,
    prompt_len: int,
    output_len: int,
    max_tokens: int | None = None,
    hashes: tuple[int, ...] | None = None,
    **kw,
) -> Request:
    """A request whose oracle emits EOS as its `output_len`-th token."""
    req = Request(
        rid,
        0.0,
        prompt_len,
        max_tokens if max_tokens is not None else output_len,
        prompt_block_hashes=hashes,
        **kw,
    )
    OUTPUT_LEN[rid] = output_len
    return req


OUTPUT_LEN: dict[str, int] = {}


def oracle(policy: TrtllmPolicy, plan: StepPlan) -> StepResult:
    """Last context chunks and generation steps sample: half the drafts accepted, EOS at the target."""
    result = StepResult(step_id=plan.step_id)
    for rid, n in plan.num_scheduled_tokens.items():
        req = policy.requests[rid]
        drafts = len(plan.spec_decode_tokens.get(rid, ()))
        if req.is_context_init_state and req.context_current_position + n - drafts < req.prompt_len:
            result.sampled_token_ids[rid] = []  # a non-last chunk samples nothing
            continue
        done = len(req.request.output_token_ids)
        tokens = []
        for _ in range(drafts // 2 + 1):
            done += 1
            tokens.append(EOS if done >= OUTPUT_LEN[rid] else TOKEN)
            if tokens[-1] == EOS:
                break
        result.sampled_token_ids[rid] = tokens
        if req.request.num_spec_tokens:
            result.draft_token_ids[rid] = [TOKEN] * req.request.num_spec_tokens
    return result


def run(
    policy: TrtllmPolicy, arrivals: list[tuple[int, Request]], max_steps: int = 5000, check: bool = True
) -> RunLog:
    """Add requests at their step, schedule/execute/update until everything finished."""
    log = RunLog()
    pending = sorted(arrivals, key=lambda a: a[0])
    step = 0
    while (pending or policy.has_requests()) and step < max_steps:
        while pending and pending[0][0] <= step:
            policy.add_request(pending.pop(0)[1])
        plan = policy.schedule()
        log.plans.append(plan)
        log.max_running = max(log.max_running, len(plan.num_scheduled_tokens))
        outputs = policy.update_from_output(plan, oracle(policy, plan))
        log.delivered.append({o.request_id: len(o.new_token_ids) for o in outputs})
        for out in outputs:
            if out.new_token_ids and out.request_id not in log.first_token_step:
                log.first_token_step[out.request_id] = step
            if out.finish_reason is not None:
                log.finished[out.request_id] = out.finish_reason
        if check:
            policy.check_invariants()
        step += 1
    return log


def run_pipelined(
    policy: TrtllmPolicy, arrivals: list[tuple[int, Request]], depth: int, max_steps: int = 5000
) -> RunLog:
    """A batch queue: up to `depth` plans in flight; the oldest is executed and applied when full."""
    log = RunLog()
    pending = sorted(arrivals, key=lambda a: a[0])
    queue: list[StepPlan] = []
    step = 0
    while (pending or policy.has_requests() or queue) and step < max_steps:
        while pending and pending[0][0] <= step:
            policy.add_request(pending.pop(0)[1])
        plan = policy.schedule()
        in_flight = {rid for q in queue for rid in q.num_scheduled_tokens}
        assert not in_flight & set(plan.num_scheduled_tokens), "a request in two micro-batches"
        log.plans.append(plan)
        if plan.num_scheduled_tokens:
            queue.append(plan)
        policy.check_invariants()
        if queue and (len(queue) >= depth or not plan.num_scheduled_tokens):
            done = queue.pop(0)
            for out in policy.update_from_output(done, oracle(policy, done)):
                if out.finish_reason is not None:
                    log.finished[out.request_id] = out.finish_reason
            policy.check_invariants()
        step += 1
    return log


BLOCK = 16


PREFIXES = [None, (1, 2, 3), (1, 2, 4), (5, 6)]


@st.composite
def workloads(draw):
    """A few requests, some sharing prefix blocks, arriving over the first steps; plus knobs."""
    n = draw(st.integers(1, 7))
    reqs = []
    for i in range(n):
        prompt = draw(st.integers(1, 120))
        prefix = draw(st.sampled_from(PREFIXES))
        hashes = None if prefix is None else prefix[: prompt // BLOCK]
        out = draw(st.integers(1, 24))
        extra = dict(
            lora_id=draw(st.sampled_from([None, None, 1, 2])),
            num_spec_tokens=draw(st.sampled_from([0, 0, 2, 3])),
        )
        reqs.append((draw(st.integers(0, 8)), i, prompt, out, hashes, extra))
    largest = max(-(-(p + o) // BLOCK) for _, _, p, o, _, _ in reqs)
    knobs = dict(
        num_gpu_blocks=largest + 1 + draw(st.integers(0, 12)),
        max_num_batched_tokens=draw(st.sampled_from([32, 64, 256])),
        chunk_unit_size=draw(st.sampled_from([16, 32])),
        max_num_seqs=draw(st.integers(1, 6)),
        two_step_lookahead=draw(st.booleans()),
        enable_prefix_aware_scheduling=draw(st.booleans()),
        max_input_len=draw(st.sampled_from([None, 130])),
        max_peft_pages=draw(st.sampled_from([None, 1, 2])),
    )
    return reqs, knobs
