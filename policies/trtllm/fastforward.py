"""Exact fast-forward hooks of the TensorRT-LLM policies (one micro-batch, synchronous engine only).

In a steady generation phase TensorRT-LLM's SimpleScheduler changes nothing but counters: every
active request is GENERATION_IN_PROGRESS, so the capacity scheduler admits all of them (no context
to reserve for, skip or chunk), the micro-batch scheduler takes all of them (count, token and
beam-width gates do not bind), and the resource manager gives each one token through
`KVCacheManager.allocate_slots`, the same call the baselines replay. What can differ is where the
pool runs short: max-requests and no-evict stop at the first allocation that would fail (an OOM
pause), max-utilization at the first step whose next-step reservation (one or two steps of look-ahead)
exceeds the free blocks (a pause of the last started request). The horizon stops before either.
`advance` then advances the step counters, the fence sequence numbers the policy stamps on every
step, and each LlmRequest's delivered-output mark.
"""

from __future__ import annotations

from ..baselines.fastforward import BaselineFastForward
from ..request import Request, RequestStatus
from .capacity import CapacitySchedulerPolicy
from .micro_batch import lora_key
from .state import LlmRequest, LlmRequestState


class TrtllmFastForward(BaselineFastForward):
    """TensorRT-LLM's steady generation state, output cap, reservations and step counters."""

    def has_request(self, request_id: str) -> bool:
        """Whether the policy still tracks the request (its LlmRequest table)."""
        return request_id in self.policy.requests

    def steady_running(self, depth: int) -> list[Request] | None:
        """Every active request, in the micro-batch's order, if each is a plain one-token generation."""
        p = self.policy
        if depth != 1 or p.max_concurrent_batches != 1 or not p.active or p.inflight:
            return None
        cfg = self.config
        n = len(p.active)
        if (
            n != len(p.requests)
            or n > cfg.max_num_seqs
            or n > cfg.effective_max_batch_size
            or n > cfg.effective_max_num_tokens
            or cfg.max_peft_pages is not None
            or self.kv.deferred_frees
        ):
            return None
        if not all(self._steady(req) for req in p.active):
            return None
        return [req.request for req in sorted(p.active, key=lora_key)]  # sort_requests' order

    @staticmethod
    def _steady(req: LlmRequest) -> bool:
        """A decoding request whose next step is one token, delivered, with nothing else attached."""
        r = req.request
        out = len(r.output_token_ids)
        return (
            req.state == LlmRequestState.GENERATION_IN_PROGRESS
            and req.has_run
            and req.beam_width == 1
            and not req.draft_tokens
            and req.num_delivered == out
            and r.status == RequestStatus.RUNNING
            and not r.num_spec_tokens
            and not r.spec_token_ids
            and not r.stop_token_ids
            and not r.structured_output
            and not r.num_output_placeholders
            and not r.num_in_flight_tokens
            and not r.num_stale_output_tokens
            and not r.is_prefill_chunk
            and r.num_computed_tokens == r.prompt_len + out - 1
        )

    def _max_new(self, r: Request) -> int:
        """append_tokens' length stop (getMaxNumGeneratedTokens >= mMaxNewTokens) as an output count.

        A pause folds outputs into the LlmRequest's prompt and shrinks its budget by as much.
        """
        req = self.policy.requests[r.request_id]
        return req.max_new_tokens + req.prompt_len - r.prompt_len

    def horizon(self, reqs: list[Request], limit: int) -> int:
        """The shared horizon, and for max-utilization with two-step look-ahead the reservation's."""
        k = super().horizon(reqs, limit)
        if (
            k > 0
            and self.policy.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION
            and self.config.two_step_lookahead
        ):
            k = self._two_step_horizon(reqs, k)
        return k

    def _two_step_horizon(self, reqs: list[Request], k: int) -> int:
        """Steps before some schedule's two-step reservation exceeds the free blocks (a pause).

        Schedule i reserves the blocks the allocations of steps i and i + 1 take (at most: the
        output cap may trim the second step), against the free blocks left by steps before i.
        """
        bs, tables = self.kv.block_size, self.kv.req_to_blocks
        offsets: list[int] = []
        for r in reqs:
            first = len(tables[r.request_id]) * bs - r.num_computed_tokens
            offsets.extend(range(max(first, 0), k + 1, bs))
        free = self.kv.num_free_blocks
        if len(offsets) > free:
            offsets.sort()
            k = min(k, max(offsets[free] - 1, 0))  # the first i with allocations(<= i + 1) > free
        return k

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """Step counters, the fences every non-empty step stamps, and the delivered-output marks."""
        p = self.policy
        p.iter_counter += k
        p.stats.num_steps += k
        p.stats.num_computed_tokens += k * len(reqs)
        kv = self.kv
        kv.sched_step_seq += k
        kv.processed_step_seq += k
        requests = p.requests
        for r in reqs:
            r.last_sched_seq = kv.sched_step_seq
            requests[r.request_id].num_delivered = len(r.output_token_ids)
