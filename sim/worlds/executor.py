"""The simulated executor: turns a StepPlan into a StepResult (oracle) and a GPU time (latency model).

It implements schedsim.policies.Executor. `launch` does all the work at once (the result depends
only on the plan and the requests' state at launch); the world decides when the result becomes
visible. The executor keeps, like a model runner, each running request's true next output position:
with async scheduling and speculative decoding the plan's context lengths are optimistic (they
assume every draft is accepted), so a continuing request samples at its true position, while a
new or resumed request (its worker state rebuilt) samples at the position its plan implies.
A request counts as a decode when it computes exactly one new token past its prompt plus its
draft positions (a padded admission's -1 drafts included); anything else, including a resumed
request recomputing its prompt and outputs after preemption, is a prefill chunk.

Speculative decoding, as vLLM's V1 worker verifies drafts: a -1 placeholder is never a draft the
target can accept, so a padded admission accepts nothing; async scheduling only hands the worker
placeholders, and the worker holds real drafts for a request only if it sampled in the batch right
before (else it accepts nothing). With a draft model (`draft_latency_model`), each step's GPU time
adds the drafter's passes after sampling: one over the step's tokens plus one slot per request
(the extra input-budget slot vLLM's scheduler charges), then num_spec_tokens - 1 one-token passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mypy_extensions import i64
from schedsim.latency.base import StepShape
from schedsim.policies import Request, StepPlan, StepResult
from schedsim.worlds.oracle import TokenDraw, WorkloadOracle, synthetic_token, verifiable_drafts


class SimStep:
    """A launched step: its result, modelled GPU time and batch composition."""

    def __init__(
        self,
        step: int,
        plan: StepPlan,
        result: StepResult,
        gpu_time: float,
        num_prefill_reqs: int = 0,
        num_decode_reqs: int = 0,
        num_prefill_tokens: int = 0,
        num_decode_tokens: int = 0,
        num_spec_tokens: int = 0,
        defer_sampling: bool = False,
    ) -> None:
        self.step, self.plan, self.result, self.gpu_time = step, plan, result, gpu_time
        self.num_prefill_reqs, self.num_decode_reqs = num_prefill_reqs, num_decode_reqs
        self.num_prefill_tokens, self.num_decode_tokens = num_prefill_tokens, num_decode_tokens
        self.num_spec_tokens, self.defer_sampling = num_spec_tokens, defer_sampling
        # the drafter's part of gpu_time: it runs after sampling (after a deferred sample's release)
        self.draft_time = 0.0
        # filled in by the world that runs it
        self.ready, self.start, self.end = 0.0, math.nan, math.nan


class RunnerState(TokenDraw):
    """What the model runner holds for a request it has run: the oracle's key and EOS position
    (its `TokenDraw`), the request's fixed fields and sampling rules, and its true next output
    position (no reference to the Request: a finished one is only forgotten with the next plan,
    and must not be kept alive)."""

    def __init__(self, req: Request, key: i64, last: int) -> None:
        super().__init__(key, last)
        self.prompt_len = req.prompt_len  # (a Request's prompt never changes)
        self.num_spec_tokens = req.num_spec_tokens
        eos = req.eos_token_id
        self.eos: i64 = eos if eos is not None else -1  # synthetic ids are >= 3: -1 matches none
        self.stops_at_eos = eos is not None and not req.ignore_eos
        self.plain = not req.stop_token_ids  # synthetic ids stand as drawn (no stop ids to avoid)
        self.position = -1  # next output position; -1: taken from the next plan (KV rebuilt)


class SimExecutor:
    """Executor protocol over a workload oracle and a latency model."""

    def __init__(
        self,
        oracle: WorkloadOracle,
        latency_model: Any,
        propose_drafts: bool = True,
        draft_latency_model: Any = None,
        num_spec_tokens: int = 0,
    ) -> None:
        self.oracle = oracle
        self.latency_model = latency_model
        # the step time of prefills and draft-free decodes from the decodes' count and context sum,
        # where the model has it (its step_time routes such shapes there: the same float without
        # a tuple per decode)
        self.plain_step_time: Callable[[list[tuple[int, int]], int, int], float] | None = getattr(
            latency_model, "plain_step_time", None
        )
        self.propose_drafts = propose_drafts
        self.draft_latency_model = draft_latency_model  # the draft model's step times, or None
        self.num_spec_tokens = num_spec_tokens
        self.workers: dict[str, RunnerState] = {}  # request id -> the runner's state of it
        # speculative requests: the launch that last sampled for them (the worker's drafts)
        self.last_sampled: dict[str, int] = {}

    def launch(
        self, plan: StepPlan, requests: dict[str, Request], step: int = -1, defer_sampling: bool = False
    ) -> SimStep:
        """Compute the step's sampled tokens and shape now; the world times its completion."""
        # _play overwrites each scheduled request's entry, in plan order: a copy of the plan's table
        # costs less than inserting the keys afresh (no resizes)
        sampled: Any = plan.num_scheduled_tokens.copy()
        result = StepResult(step_id=plan.step_id, sampled_token_ids=sampled)
        handle = SimStep(step, plan, result, 0.0, defer_sampling=defer_sampling)
        self._reset_positions(plan)  # (a plan may preempt, pause or finish and schedule nothing)
        if not plan.num_scheduled_tokens:
            return handle
        # the shape's lists; a StepShape (an interpreted dataclass) only for a model that needs one
        prefills: list[tuple[int, int]] = []
        decodes: list[tuple[int, int]] = []
        # the decodes' contexts of a plan without drafts, kept only for a model that needs them
        plain_step_time = self.plain_step_time
        plain: list[int] | None = [] if plain_step_time is None else None
        ctx_sum = self._play(plan, requests, result, prefills, decodes, plain, handle)
        if plain_step_time is not None and not handle.num_spec_tokens:
            handle.gpu_time = float(plain_step_time(prefills, handle.num_decode_reqs, ctx_sum))
        else:
            if plain:  # (None with drafts too: then the decodes are listed already)
                decodes = [(ctx, 0) for ctx in plain]
            handle.gpu_time = float(self.latency_model.step_time(StepShape(prefills, decodes)))
        if self.draft_latency_model is not None:
            handle.draft_time = self._draft_time(plan)
            handle.gpu_time += handle.draft_time
        return handle

    def collect(self, handle: SimStep) -> StepResult:
        """The launched step's result."""
        return handle.result

    def _reset_positions(self, plan: StepPlan) -> None:
        """Forget worker state of finished (and newly admitted) requests; positions of those whose
        KV is rebuilt come from their next plan."""
        workers = self.workers
        for rid in plan.finished_req_ids:
            self.oracle.forget(rid)
            self.last_sampled.pop(rid, None)
            workers.pop(rid, None)
        for rid in plan.new_req_ids:
            workers.pop(rid, None)
        for ids in (plan.preempted_req_ids, plan.paused_req_ids, plan.resumed_req_ids):
            for rid in ids:
                w = workers.get(rid)
                if w is not None:
                    w.position = -1

    def _worker(self, req: Request) -> RunnerState:
        """The runner's state of a request, made on its first scheduled step."""
        key, last = self.oracle.info[req.request_id]
        w = self.workers[req.request_id] = RunnerState(req, key, last)
        return w

    def _play(
        self,
        plan: StepPlan,
        requests: dict[str, Request],
        result: StepResult,
        prefills: list[tuple[int, int]],
        decodes: list[tuple[int, int]],
        plain: list[int] | None,
        h: SimStep,
    ) -> int:
        """Classify each scheduled request and sample its tokens (the simulator's hot loop); returns
        the decodes' context sum. The decodes of a plan without drafts go to `plain` (their contexts)
        instead of `decodes`, or nowhere (`plain` None): such a step needs only their count and sum
        (`plain_step_time`)."""
        oracle, spec = self.oracle, plan.spec_decode_tokens
        ctxs: dict[str, Any] = plan.context_lens  # values read as the objects they are (no unbox)
        sampled, drafts = result.sampled_token_ids, result.draft_token_ids
        check_kv = bool(oracle.kv_fail)
        workers, token, span, vocab = self.workers, oracle.token, oracle.span, oracle.vocab
        propose = self.propose_drafts
        step, last_sampled = h.step, self.last_sampled
        pre_tok = dec_tok = spec_tok = num_dec = ctx_sum = 0
        for rid, n in plan.num_scheduled_tokens.items():
            w = workers.get(rid)
            if w is None:
                w = self._worker(requests[rid])
            ctx_obj: Any = ctxs[rid]  # kept as read: `plain` stores the object, not a new box
            ctx: int = ctx_obj
            k = len(spec[rid]) if spec and rid in spec else 0
            new = n - k
            prompt = w.prompt_len
            if new == 1 and (ctx >= prompt or k):
                if spec:
                    decodes.append((ctx, k))
                elif plain is not None:
                    plain.append(ctx_obj)
                num_dec += 1
                ctx_sum += ctx
                dec_tok += n
                spec_tok += k
            else:
                prefills.append((new, ctx))
                pre_tok += new
            if check_kv and oracle.kv_load_fails(rid):
                result.failed_kv_load_ids.add(rid)
                sampled[rid] = []
                continue
            index = w.position
            if index < 0:  # new, resumed or still prefilling: position from the plan
                end = ctx + new
                if end < prompt + len(requests[rid].output_token_ids):
                    sampled[rid] = []  # a prefill chunk samples nothing
                    continue
                index = end - prompt
            if k:
                held = last_sampled.get(rid) == step - 1  # the worker kept drafts from the last batch
                toks = oracle.sample(requests[rid], index, verifiable_drafts(spec[rid], held))
            elif index == w.last and w.stops_at_eos:  # the common case, inlined: WorkloadOracle.token
                toks = [w.eos]
            else:
                tok = synthetic_token(w.key, index, span)
                toks = [vocab[tok] if tok != w.eos and w.plain else token(requests[rid], index)]
            sampled[rid] = toks
            w.position = index + len(toks)
            if w.num_spec_tokens:
                last_sampled[rid] = step
                if propose:
                    drafts[rid] = oracle.propose(requests[rid], index + len(toks) - 1)
        h.num_prefill_reqs, h.num_decode_reqs = len(prefills), num_dec
        h.num_prefill_tokens, h.num_decode_tokens, h.num_spec_tokens = pre_tok, dec_tok, spec_tok
        return ctx_sum

    def _draft_time(self, plan: StepPlan) -> float:
        """The draft model's passes after the step: every scheduled request's tokens plus one slot
        (its context as the target saw it), then num_spec_tokens - 1 passes of one token each."""
        model, k = self.draft_latency_model, self.num_spec_tokens
        if k == 0:
            return 0.0
        ctxs = plan.context_lens
        first = StepShape()
        for rid, n in plan.num_scheduled_tokens.items():
            first.prefills.append((n + 1, ctxs[rid]))
        t = float(model.step_time(first))
        for j in range(1, k):
            shape = StepShape()
            for rid, n in plan.num_scheduled_tokens.items():
                shape.decodes.append((ctxs[rid] + n + j, 0))
            t += float(model.step_time(shape))
        return t
