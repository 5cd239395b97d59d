"""Exact fast-forward hooks of `sglang-overlap` (both with the overlap loop and without it).

In a steady decode state SGLang's `get_next_batch_to_run` merges no extend batch, forms no
prefill batch (nothing waits, nothing is chunked), drops no request finishing in flight (the
horizon stops before one would), finds enough free pages (the horizon stops before a step whose
page-aligned requests would need more: that step would retract), decays the new-token ratio once
and decodes every running request through `allocate_slots`. `advance` replays exactly that:
the KV calls through the shared replay, the ratio decayed k times, the plan counter;
`in_flight_plan` builds the in-flight decode plan with its request-pool slots and future-token
slots.
"""

from __future__ import annotations

from ..baselines.fastforward import BaselineFastForward
from ..request import Request, RequestStatus
from .plan import SGLangStepPlan


class SGLangFastForward(BaselineFastForward):
    """The overlap scheduler's steady state, counters and in-flight plan."""

    def steady_running(self, depth: int) -> list[Request] | None:
        """Running requests if the next iterations are plain decode batches of all of them."""
        p = self.policy
        if depth != p.max_concurrent_batches or not p.running or p.waiting:
            return None
        if (
            p.preempted_req_ids
            or p.chunked_req is not None
            or p.last_extend_reqs
            or len(p.running) != len(p.requests)
            or len(p.running) > self.config.max_num_batched_tokens
        ):
            return None
        lag = self.lag
        running_status, slots = RequestStatus.RUNNING, p.pool.slot_of
        running: list[Request] = p.running
        for r in running:
            if (
                r.status != running_status
                or r.num_output_placeholders != lag
                or r.num_in_flight_tokens != lag
                or r.num_stale_output_tokens
                or r.is_prefill_chunk
                or r.stop_token_ids
                or r.num_spec_tokens
                or r.structured_output
                or r.request_id not in slots
                or r.num_computed_tokens != r.prompt_len + len(r.output_token_ids) - 1 + lag
            ):
                return None
        return running

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """The plan counter, and one new-token-ratio decay per decode batch."""
        p = self.policy
        p.step_id += k
        for _ in range(k):
            p.ratio.decay_step()

    def in_flight_plan(self, reqs: list[Request]) -> SGLangStepPlan:
        """The decode plan the stretch's last schedule() made (it stays in flight after the jump)."""
        slots = self.policy.pool.slot_of
        plan = SGLangStepPlan(step_id=self.policy.step_id - 1, forward_mode="decode")
        for r in reqs:
            rid = r.request_id
            plan.num_scheduled_tokens[rid] = 1
            plan.context_lens[rid] = r.num_computed_tokens - 1
            plan.block_ids[rid] = self.kv.get_block_ids(rid)
            plan.req_pool_indices[rid] = slots[rid]
            if self.lag:
                plan.future_token_slots[rid] = slots[rid]  # its input token is still in flight
        plan.total_num_scheduled_tokens = len(reqs)
        plan.finished_req_ids = []
        plan.preempted_req_ids = []
        return plan
