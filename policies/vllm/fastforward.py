"""Exact fast-forward hooks of the vLLM policies: steady decode stretches in closed form.

A stretch is a run of engine-loop iterations in which `schedule()` gives every running request
exactly one token and `update_from_output` finishes none. The simulator (`schedsim.fastforward.stretch`)
asks `ff_running` whether the policy is in that steady state, `ff_horizon` how many iterations its
own caps (max_tokens, max_model_len, free KV blocks) allow, and `ff_advance` to apply k iterations
at once. The KV work is replayed (`schedsim.policies.fastforward`) through
`KVCacheManager.append_slots` at exactly the iterations where the fast path of
`_schedule_running` (`KVCacheManager.holds_new_tokens`) would not apply.

Supported: `vllm` with one batch in flight and `vllm-async` with two (the engines' defaults).
"""

from __future__ import annotations

from ..fastforward import FastForwardBase
from ..plan import RequestOutput, StepPlan
from ..request import Request, RequestStatus
from .output import check_stop
from .state import VllmState


class FastForwardMixin(FastForwardBase, VllmState):
    """The vLLM policies' steady state, KV call and counters."""

    def ff_running(self, depth: int) -> list[Request] | None:
        """The running requests if the next iterations are plain decodes of each, else None."""
        if depth != self.max_concurrent_batches or not self.running or len(self.waiting):
            return None
        cfg = self.config
        if (self.preempted_req_ids or self.recompute_frontier or self.num_spec_tokens
                or len(self.running) > cfg.max_num_batched_tokens
                or (self.kv.deferred_frees and self._ff_released_blocks() < 0)):
            return None
        lag = self.max_concurrent_batches - 1  # outputs in flight per request: 0 sync, 1 async
        running_status = RequestStatus.RUNNING
        for r in self.running:
            # async: a request whose (last) prefill chunk is in flight is steady from the next
            # schedule on; the simulator checks that chunk samples its first token
            if (r.status != running_status or r.num_output_placeholders != lag
                    or (r.num_in_flight_tokens != lag if not lag else r.num_in_flight_tokens < 1)
                    or r.num_stale_output_tokens
                    or r.structured_output or r.stop_token_ids or r.num_spec_tokens
                    or (r.spec_token_ids and not self.is_async)
                    or r.num_computed_tokens != r.prompt_len + len(r.output_token_ids) - 1 + lag):
                return None
        return self.running

    def _ff_max_new_all(self, reqs: list[Request]) -> list[int]:
        """vLLM stops at max_tokens (the base _ff_max_new), read without a call per request."""
        return [r.max_tokens for r in reqs]

    def _ff_first_kv(self, reqs: list[Request], cs: list[int], out0: list[int]) -> list[bool]:
        """The fast-path test of every request's first schedule, in one call."""
        kv = self.kv
        out: list[bool] = []
        for j in range(len(reqs)):  # (compiled: a native call each, no bound method or zip)
            r = reqs[j]
            out.append(not kv.holds_new_tokens(r.request_id, cs[j] + 1, r.prompt_len + out0[j]))
        return out

    def _ff_sched_kv(self, r: Request, total: int, known: int, out0: int, i: int,
                     toks: list[int]) -> bool:
        """_schedule_running's fast-path test, then append_slots where it does not apply."""
        kv = self.kv
        rid = r.request_id
        if kv.holds_new_tokens(rid, total, known):
            return False  # the fast path: nothing to do
        self._ff_set(r, out0, i, toks)
        r.num_computed_tokens = total - 1
        if not kv.append_slots(r, 1):
            raise AssertionError(f"fast-forward: {rid} found no free block inside its horizon")
        return True

    def _ff_after_advance(self, reqs: list[Request], k: int) -> None:
        """current_step, and the async scheduler's shared draft-placeholder list."""
        self.current_step += k
        placeholders = getattr(self, "_spec_placeholders", None)
        if placeholders is not None:
            for r in reqs:
                r.spec_token_ids = placeholders

    _ff_finishes = True

    def ff_skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """async: the last schedule skips a request whose in-flight output reaches max_tokens."""
        if not self.is_async:
            return []
        return [r for r in reqs if len(r.output_token_ids) + k >= r.max_tokens]

    def _ff_skipped_update(self, r: Request) -> None:
        """update_from_output publishes the blocks its delivered output completed; with no
        schedule in the same iteration to have done it first, a new full block may be left."""
        self.kv.cache_blocks(r, r.num_computed_tokens - r.num_in_flight_tokens)

    def ff_finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """The stretch's last update (its tokens appended by ff_advance): update_from_output's
        stop path for each request that stops there, in running order."""
        max_model_len = self.config.max_model_len
        outputs, stopped = [], set()
        for r in reqs:
            if check_stop(r, max_model_len):
                self._free_request(r)
                outputs.append(RequestOutput(r.request_id, [r.output_token_ids[-1]], r.status))
                stopped.add(id(r))
        if stopped:
            self.running = [r for r in self.running if id(r) not in stopped]
        return outputs

    def ff_plan(self, reqs: list[Request]) -> StepPlan:
        """The plan the last schedule() of a stretch made (it stays in flight after the jump)."""
        tables = self.kv.req_to_blocks
        scheduled: dict[str, int] = {}
        context: dict[str, int] = {}
        blocks: dict[str, list[int]] = {}
        for r in reqs:
            rid = r.request_id
            scheduled[rid] = 1
            context[rid] = r.num_computed_tokens - 1
            blocks[rid] = tables[rid]
        return StepPlan(step_id=self.current_step - 1, num_scheduled_tokens=scheduled,
                        total_num_scheduled_tokens=len(reqs), context_lens=context,
                        spec_decode_tokens={}, block_ids=blocks, new_req_ids=[], resumed_req_ids=[],
                        preempted_req_ids=[], finished_req_ids=[])
