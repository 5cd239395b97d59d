"""Exact fast-forward hooks of the TensorRT-LLM policies (one micro-batch, synchronous engine only).

In a steady generation phase PyExecutor's step changes nothing but counters: every active request
is GENERATION_IN_PROGRESS, nothing waits in the executor queue, so the capacity scheduler admits
all of them (no context to reserve for, skip or chunk), the micro-batch scheduler takes all of
them in LoRA order (count, token and beam-width gates do not bind), and `prepare_resources` gives
each one token (`addToken`), which takes a block from the front of the free queue each time a
request crosses a block boundary; generation blocks are not stored before release. What can
stop a stretch is the pool: an addToken that finds no free block (TensorRT-LLM fails), or, for
max-utilization, a schedule whose next-step reservation
(one or two steps of look-ahead) exceeds the free blocks (a pause). The horizon stops before
either, and before any request reaches its output cap. `advance` replays the boundary
allocations through the real manager in step order (iteration, then batch order), so the free
queue, block tables and evictions come out identical, and advances the counters. No stretch starts
while a KV transfer of a disaggregated pair is in flight: its end frees blocks (a send) or turns a
request into a generation (a receive) at a step only the cluster knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..plan import RequestOutput, StepPlan
from ..request import Request, RequestStatus
from .capacity import CapacitySchedulerPolicy
from .micro_batch import sort_by_lora
from .state import LlmRequest, LlmRequestState

if TYPE_CHECKING:
    from .policy import TrtllmPolicy


class TrtllmFastForward:
    """FastForwardHooks over a TrtllmPolicy: its steady state, horizon and k-step advance."""

    finishes_in_last_update = False

    def __init__(self, policy: TrtllmPolicy) -> None:
        """Read the policy's config and KV cache manager."""
        self.policy = policy
        self.config = policy.config
        self.kv = policy.kv

    # ---- the steady state ----
    def steady_running(self, depth: int) -> list[Request] | None:
        """Every active request, in the micro-batch's order, if each is a plain one-token generation."""
        p = self.policy
        if (
            depth != 1
            or p.max_concurrent_batches != 1
            or not p.active
            or p.inflight
            or p.waiting
            or p.release_after_step
            or p.transceiver.has_transfers_in_flight()
        ):
            return None
        cfg = self.config
        n = len(p.active)
        if (
            n > cfg.effective_max_batch_size
            or n > cfg.effective_max_num_tokens
            or cfg.max_peft_pages is not None
        ):
            return None
        if not all(self._steady(req) for req in p.active):
            return None
        ordered = list(p.active)
        sort_by_lora(ordered)  # sort_requests' order
        return [req.request for req in ordered]

    def _steady(self, req: LlmRequest) -> bool:
        """A decoding request whose next step is one token, delivered, with nothing else attached."""
        r = req.request
        out = len(r.output_token_ids)
        return (
            req.state == LlmRequestState.GENERATION_IN_PROGRESS
            and req.has_run
            and req.beam_width == 1
            and not req.draft_tokens
            and req.num_delivered == out
            and req.estimated_reusable_tokens == 0
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
            and self.kv.num_tokens(r.request_id) == r.num_computed_tokens
        )

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """An arrival joins the executor queue, which the next step fetches: it ends the stretch."""
        return False

    def reported_finished_ids(self) -> list[str]:
        """Finished ids the stretch's first plan reports."""
        return self.policy.finished_req_ids

    def has_request(self, request_id: str) -> bool:
        """Whether the policy still tracks the request."""
        return request_id in self.policy.requests

    def skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """The last schedule leaves nobody out (one batch in flight)."""
        return []

    def finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """Stretches never end with a finishing update here."""
        raise NotImplementedError("TensorRT-LLM stretches stop before any finish")

    def in_flight_plan(self, reqs: list[Request]) -> StepPlan:
        """One batch in flight: no plan outlives a stretch."""
        raise NotImplementedError("TensorRT-LLM stretches run on the synchronous engine only")

    # ---- the horizon ----
    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations (<= limit) before an output cap, max_model_len, or the pool stops a request."""
        requests = self.policy.requests
        max_model_len = self.config.max_model_len
        k = limit
        for r in reqs:
            req = requests[r.request_id]
            out = len(r.output_token_ids)
            cap = req.max_new_tokens + req.prompt_len - r.prompt_len  # outputs at which it finishes
            k = min(k, cap - out - 1, max_model_len - r.prompt_len - out - 1)
        if k <= 0:
            return 0
        kv = self.kv
        if kv.growable:
            return k  # max-requests: blocks never run short
        offsets = self._allocation_offsets(reqs, k + 1)
        free = kv.num_free_blocks
        two_step = (
            self.policy.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION
            and self.config.two_step_lookahead
        )
        if len(offsets) > free:
            first_short = offsets[free]  # the iteration of the first allocation the pool cannot give
            k = min(k, max(first_short - 1, 0) if two_step else first_short)
        return k

    def _allocation_offsets(self, reqs: list[Request], k: int) -> list[int]:
        """Sorted iterations i < k whose addToken crosses a block boundary (one block each)."""
        bs = self.kv.tokens_per_block
        offsets: list[int] = []
        for r in reqs:
            offsets.extend(range((-r.num_computed_tokens) % bs, k, bs))
        offsets.sort()
        return offsets

    # ---- the advance ----
    def advance(
        self, reqs: list[Request], k: int, tokens: list[list[int]], skipped: Sequence[Request] = ()
    ) -> list[float]:
        """Apply k iterations; tokens[j] are request j's next k delivered tokens.

        Returns the KV usage seen after each of the k schedules.
        """
        assert not skipped, "TensorRT-LLM stretches leave nobody out"
        p, kv = self.policy, self.kv
        bs = kv.tokens_per_block
        events: list[tuple[int, int]] = []
        starts = [r.num_computed_tokens for r in reqs]
        for j, c in enumerate(starts):
            events.extend((i, j) for i in range((-c) % bs, k, bs))
        events.sort()
        usage: list[float] = []
        e = 0
        for i in range(k):
            while e < len(events) and events[e][0] == i:
                j = events[e][1]
                rid = reqs[j].request_id
                kv.fast_forward_tokens(rid, starts[j] + i)
                kv.add_token(rid)  # crosses the boundary: a block from the free queue's front
                e += 1
            usage.append(kv.usage)
        for j, r in enumerate(reqs):
            kv.fast_forward_tokens(r.request_id, starts[j] + k)
            r.output_token_ids.extend(tokens[j])
            r.num_computed_tokens = r.prompt_len + len(r.output_token_ids) - 1
            r.num_in_flight_tokens = 0
            r.is_prefill_chunk = False
            p.requests[r.request_id].num_delivered = len(r.output_token_ids)
        p.finished_req_ids = []
        p.iter_counter += k
        p.stats.num_steps += k
        p.stats.num_computed_tokens += k * len(reqs)
        return usage
