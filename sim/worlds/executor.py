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
from collections.abc import Mapping
from typing import Any

from schedsim.latency.base import StepShape
from schedsim.policies import Request, StepPlan, StepResult
from schedsim.worlds.oracle import WorkloadOracle, synthetic_token, verifiable_drafts


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
        self.propose_drafts = propose_drafts
        self.draft_latency_model = draft_latency_model  # the draft model's step times, or None
        self.num_spec_tokens = num_spec_tokens
        self.next_position: dict[str, int] = {}  # request id -> next output position on the "worker"
        # speculative requests: the launch that last sampled for them (the worker's drafts)
        self.last_sampled: dict[str, int] = {}

    def launch(
        self, plan: StepPlan, requests: Mapping[str, Request], step: int = -1, defer_sampling: bool = False
    ) -> SimStep:
        """Compute the step's sampled tokens and shape now; the world times its completion."""
        result = StepResult(step_id=plan.step_id)
        handle = SimStep(step, plan, result, 0.0, defer_sampling=defer_sampling)
        if not plan.num_scheduled_tokens:
            return handle
        shape = StepShape()
        self._play(plan, requests, result, shape, handle)
        handle.gpu_time = float(self.latency_model.step_time(shape))
        if self.draft_latency_model is not None:
            handle.draft_time = self._draft_time(plan)
            handle.gpu_time += handle.draft_time
        return handle

    def collect(self, handle: SimStep) -> StepResult:
        """The launched step's result."""
        return handle.result

    def _reset_positions(self, plan: StepPlan) -> None:
        """Forget worker state of finished requests and of those whose KV is rebuilt."""
        for rid in plan.finished_req_ids:
            self.oracle.forget(rid)
            self.last_sampled.pop(rid, None)
        nxt = self.next_position
        for ids in (
            plan.finished_req_ids,
            plan.preempted_req_ids,
            plan.paused_req_ids,
            plan.new_req_ids,
            plan.resumed_req_ids,
        ):
            for rid in ids:
                nxt.pop(rid, None)

    def _play(
        self,
        plan: StepPlan,
        requests: Mapping[str, Request],
        result: StepResult,
        shape: StepShape,
        h: SimStep,
    ) -> None:
        """Classify each scheduled request and sample its tokens (the simulator's hot loop)."""
        oracle, spec, ctxs = self.oracle, plan.spec_decode_tokens, plan.context_lens
        sampled, drafts = result.sampled_token_ids, result.draft_token_ids
        prefills, decodes = shape.prefills, shape.decodes
        check_kv = bool(oracle.kv_fail)
        self._reset_positions(plan)
        nxt, token, info, span = self.next_position, oracle.token, oracle.info, oracle.span
        propose = self.propose_drafts
        step, last_sampled = h.step, self.last_sampled
        pre_tok = dec_tok = spec_tok = 0
        for rid, n in plan.num_scheduled_tokens.items():
            req = requests[rid]
            ctx = ctxs[rid]
            k = len(spec[rid]) if spec and rid in spec else 0
            new = n - k
            prompt = req.prompt_len
            if new == 1 and (ctx >= prompt or k):
                decodes.append((ctx, k))
                dec_tok += n
                spec_tok += k
            else:
                prefills.append((new, ctx))
                pre_tok += new
            if check_kv and oracle.kv_load_fails(rid):
                result.failed_kv_load_ids.add(rid)
                sampled[rid] = []
                continue
            index = nxt.get(rid)
            if index is None:  # new, resumed or still prefilling: position from the plan
                end = ctx + new
                if end < prompt + len(req.output_token_ids):
                    sampled[rid] = []  # a prefill chunk samples nothing
                    continue
                index = end - prompt
            if k:
                held = last_sampled.get(rid) == step - 1  # the worker kept drafts from the last batch
                toks = oracle.sample(req, index, verifiable_drafts(spec[rid], held))
            else:  # the common case, inlined: WorkloadOracle.token
                key, last = info[rid]
                eos = req.eos_token_id
                if index == last and eos is not None and not req.ignore_eos:
                    toks = [eos]
                else:
                    tok = synthetic_token(key, index, span)
                    toks = [tok if tok != eos and not req.stop_token_ids else token(req, index)]
            sampled[rid] = toks
            nxt[rid] = index + len(toks)
            if req.num_spec_tokens:
                last_sampled[rid] = step
                if propose:
                    drafts[rid] = oracle.propose(req, index + len(toks) - 1)
        h.num_prefill_reqs, h.num_decode_reqs = len(prefills), len(decodes)
        h.num_prefill_tokens, h.num_decode_tokens, h.num_spec_tokens = pre_tok, dec_tok, spec_tok

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
