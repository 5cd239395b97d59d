"""Exact fast-forward hooks of the TensorRT-LLM policies (one micro-batch, synchronous engine only).

In a steady generation phase PyExecutor's step changes nothing but counters: every generation
decodes one token and no context is admitted (see below for those that wait), so the capacity
scheduler admits the generations, the micro-batch scheduler takes all of them in LoRA order
(count, token and beam-width gates do not bind), and `prepare_resources` gives
each one token (`addToken`), which takes a block from the front of the free queue each time a
request crosses a block boundary; generation blocks are not stored before release. What can
stop a stretch is the pool: an addToken that finds no free block (TensorRT-LLM fails), or, for
max-utilization, a schedule whose next-step reservation
(one or two steps of look-ahead) exceeds the free blocks (a pause). The horizon stops before
either, and where a request reaches its output cap; its last update may stop requests (an EOS or
the cap), and `finish` applies those stops as `update_from_output` does. `advance` replays the
boundary allocations through the real manager in step order (iteration, then batch order), so the free
queue, block tables and evictions come out identical, and advances the counters. No stretch starts
while a KV transfer of a disaggregated pair is in flight: its end frees blocks (a send) or turns a
request into a generation (a receive) at a step only the cluster knows.

Requests may wait through a stretch when no schedule of it admits one (`_queue_blocked`): every
seat of the active set is a generation (the executor queue waits unseen), static batch already has
its batch, or the queue's head (the first context in the active set, else the executor queue's
first, which the next schedule activates) misses on blocks in every schedule. Guaranteed-no-evict
compares the head's blocks to completion with the free blocks less the generations' reservations
to completion, which a decode stretch leaves unchanged (each boundary allocation takes one block
from both); max-utilization compares its next-step blocks with the free blocks, which only fall.
Inside a stretch no block is stored and held blocks stay held, so the head's reuse credit can only
fall and its need only grow: it stays blocked. Either loop stops at the head, so nothing behind it
is looked at, and arrivals wait (`arrivals_wait`). The jump activates the executor queue once,
after its polls have taken their arrivals (`end_stretch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING

from ..fastforward import allocation_events, allocations_before, first_step_past
from ..plan import RequestOutput, StepPlan
from ..request import Request, RequestStatus
from .capacity import CapacitySchedulerPolicy
from .kv_cache_manager import NO_REUSE
from .lifecycle import finish_after
from .micro_batch import sort_by_lora
from .state import LlmRequest, LlmRequestState, LlmRequestType

if TYPE_CHECKING:
    from .policy import TrtllmPolicy


class TrtllmFastForward:
    """FastForwardHooks over a TrtllmPolicy: its steady state, horizon and k-step advance."""

    finishes_in_last_update = True  # its last update may stop requests (`finish`)

    def __init__(self, policy: TrtllmPolicy) -> None:
        """Read the policy's config and KV cache manager."""
        self.policy = policy
        self.config = policy.config
        self.kv = policy.kv
        self.waiters_stay = False  # the last steady_running's answer to arrivals_wait
        self.head: LlmRequest | None = None  # the context each schedule of the stretch asks about

    # ---- the steady state ----
    def steady_running(self, depth: int) -> list[Request] | None:
        """Every generation in the active set, in the micro-batch's order, if each is a plain
        one-token generation and no schedule of the stretch admits anyone else."""
        p = self.policy
        self.waiters_stay = False
        self.head = None
        if (
            depth != 1
            or p.max_concurrent_batches != 1
            or not p.active
            or p.inflight
            or p.release_after_step
            or p.transceiver.has_transfers_in_flight()
            or self.config.max_peft_pages is not None
        ):
            return None
        # max-requests runs every context it sees: one waiting with a seat free, or one already
        # active, is admitted by the next schedule (asked first: no scan of the generations)
        runs_every_context = p.capacity_policy is CapacitySchedulerPolicy.MAX_REQUESTS
        if runs_every_context and p.waiting and len(p.active) < p.max_num_active_requests:
            return None
        gens: list[LlmRequest] = []
        first_context = -1  # the active set's first context: the head of what waits
        generations_first = p.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION
        active = p.active
        for i in range(len(active)):
            req = active[i]
            if req.is_generation_in_progress_state:
                if not self._steady(req) or (generations_first and first_context >= 0):
                    return None  # (max-utilization would pause a generation behind a missed context)
                gens.append(req)
            elif runs_every_context or not self._fresh_context(req):
                return None
            elif first_context < 0:
                first_context = i
        n = len(gens)
        micro = p.micro  # its caps (the config's are properties: a Python call, compiled)
        limit = micro.max_num_tokens
        if not n or n > micro.max_batch_size or (limit is not None and n > limit):
            return None
        if (first_context >= 0 or p.waiting) and not self._queue_blocked(gens, first_context):
            return None
        sort_by_lora(gens)  # sort_requests' order
        return [req.request for req in gens]

    def _fresh_context(self, req: LlmRequest) -> bool:
        """A colocated context that has not started: its first chunk, no blocks, no drafts."""
        return (
            req.is_context_init_state
            and req.is_first_context_chunk
            and req.llm_request_type is LlmRequestType.CONTEXT_AND_GENERATION
            and not req.draft_tokens
            and not self.kv.has_sequence(req.request_id)
        )

    def _queue_blocked(self, gens: list[LlmRequest], first_context: int) -> bool:
        """Whether no schedule of the stretch admits a context (see the module docstring); sets
        `waiters_stay` and, where each schedule asks the pool for it, `head`."""
        p = self.policy
        room = p.max_num_active_requests - len(p.active)  # what the next schedule activates
        if first_context < 0 and room <= 0:
            self.waiters_stay = True  # generations hold every seat: the executor queue waits unseen
            return True
        policy = p.capacity_policy
        if policy is CapacitySchedulerPolicy.MAX_REQUESTS:
            return False  # it schedules every context it sees
        for req in islice(p.waiting, max(room, 0)):
            if not self._fresh_context(req):
                return False  # (a generation-only request would go ahead of the pending contexts)
        if policy is not CapacitySchedulerPolicy.STATIC_BATCH:  # (static batch: the batch is full)
            head = p.active[first_context] if first_context >= 0 else p.waiting[0]
            if len(gens) < p.capacity.max_num_requests and not self._head_blocked(head, gens):
                return False
            self.head = head
        self.waiters_stay = True
        return True

    def _head_blocked(self, head: LlmRequest, gens: list[LlmRequest]) -> bool:
        """Whether the head misses on blocks now, as the capacity policy asks (the module
        docstring says why it then misses in every schedule of the stretch)."""
        acct, kv = self.policy.acct, self.kv
        assert acct is not None
        saved = head.estimated_reusable_tokens  # (the schedule sets it; asking here must not)
        need = self._head_need(head)
        head.estimated_reusable_tokens = saved
        free = kv.num_free_blocks
        if self.policy.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION:
            return need > free  # the generations' next-step blocks only add to it
        reserved = 0
        for g in gens:
            reserved += acct.remaining_blocks_to_completion(g)
        return need > free - reserved

    def _head_need(self, head: LlmRequest) -> int:
        """The head's blocks as this round's capacity pass asks for them (it sets the head's
        estimated_reusable_tokens, as that pass does)."""
        p = self.policy
        acct = p.acct
        assert acct is not None
        summary = acct.analyze_prefix_reuse(head) if p.capacity.prefix_aware else NO_REUSE
        if p.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION:
            return acct.needed_blocks_one_step(head, p.capacity.two_steps, summary)
        return acct.remaining_blocks_to_completion(head, summary)

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """Whether arrivals inside the stretch wait through it (the last `steady_running` says; a
        prompt over max_input_len is refused at its poll and changes nothing here)."""
        return self.waiters_stay

    def _steady(self, req: LlmRequest) -> bool:
        """A decoding request whose next step is one token, delivered, with nothing else attached.

        Its sequence then holds its computed tokens (an invariant of every generation outside a
        step in flight, `check_policy_invariants`), so the pool is not asked.
        """
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
        )

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
        """The stretch's last update (its tokens appended by advance): the requests whose last
        token stops them (`append_tokens`' tests) are reported in batch order and finish in
        active order, as update_from_output finishes them."""
        p = self.policy
        max_model_len = self.config.max_model_len
        outputs: list[RequestOutput] = []
        finishing: dict[str, RequestStatus] = {}
        for r in reqs:
            req = p.requests[r.request_id]
            token = r.output_token_ids[-1]
            status = finish_after(req, token, max_model_len)
            if status is not None:
                finishing[r.request_id] = status
                outputs.append(RequestOutput(r.request_id, [token], status))
        if finishing:
            for req in [x for x in p.active if x.request_id in finishing]:
                p.finish_request(req, finishing[req.request_id])
        return outputs

    def in_flight_plan(self, reqs: list[Request]) -> StepPlan:
        """One batch in flight: no plan outlives a stretch."""
        raise NotImplementedError("TensorRT-LLM stretches run on the synchronous engine only")

    def end_stretch(self) -> None:
        """The stretch's schedules moved the executor queue into the active set, up to its cap;
        nothing left it, so doing that once now builds the same set in the same order."""
        self.policy.activate_new_requests()

    # ---- the horizon ----
    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations (<= limit): up to the one whose update reaches a request's output cap or
        max_model_len, and before the pool stops a request."""
        requests = self.policy.requests
        max_model_len = self.config.max_model_len
        k = limit
        for r in reqs:
            req = requests[r.request_id]
            out = len(r.output_token_ids)
            cap = req.max_new_tokens + req.prompt_len - r.prompt_len  # outputs at which it finishes
            # (the last update may stop it; two-argument min: compiled, a third is a generic call)
            k = min(min(k, cap - out), max_model_len - r.prompt_len - out)
        if k <= 0:
            return 0
        kv = self.kv
        if kv.growable:
            return k  # max-requests: blocks never run short
        # request j's addToken crosses a block boundary (takes a block) every bs iterations from firsts[j]
        bs = kv.tokens_per_block
        firsts = [(-r.num_computed_tokens) % bs for r in reqs]
        free = kv.num_free_blocks
        two_step = (
            self.policy.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION
            and self.config.two_step_lookahead
        )
        if allocations_before(firsts, k + 1, bs) > free:
            # the iteration of the first allocation the pool cannot give
            first_short = first_step_past(firsts, k + 1, bs, free)
            k = min(k, max(first_short - 1, 0) if two_step else first_short)
        return k

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
        # addToken crosses a block boundary (takes a block) every bs iterations; each request's
        # computed tokens stay as they start until the last loop below sets them
        events = allocation_events([(-r.num_computed_tokens) % bs for r in reqs], [k] * len(reqs), bs)
        usage: list[float] = []
        e = 0
        for i in range(k):
            if i == k - 1 and self.head is not None:
                self._head_need(self.head)  # the last schedule's capacity pass asks about the head
            while e < len(events) and events[e][0] == i:
                r = reqs[events[e][1]]
                rid = r.request_id
                kv.fast_forward_tokens(rid, r.num_computed_tokens + i)
                kv.add_token(rid)  # crosses the boundary: a block from the free queue's front
                e += 1
            usage.append(kv.usage)
        for j, r in enumerate(reqs):
            kv.fast_forward_tokens(r.request_id, r.num_computed_tokens + k)
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
