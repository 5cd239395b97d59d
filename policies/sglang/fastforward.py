"""Exact fast-forward hooks of `sglang-overlap` (both with the overlap loop and without it).

In a steady decode state SGLang's `get_next_batch_to_run` stashes no chunked request, merges no
extend batch, forms no prefill batch (nothing waits, or the batch is full: `batch_is_full`, which
only a request leaving the batch or a retraction clears, makes `get_new_batch_prefill` return
before it looks at the queue; nothing is chunked), drops no request
finishing in flight (the horizon stops before one would) and decodes every running request: the
decode check and the allocation first evict radix-tree leaves when fewer than one page per
request is free (`alloc_for_decode`'s over-estimate; the check's own demand is never larger),
then each request whose length is page-aligned takes a new page. Nothing is inserted into the
tree and no lock changes, so the tree changes only by those evictions, which depend on nothing
but the tree and the free count: `advance` replays them, and the allocations, through the real
calls in step order. The horizon stops before a step that would retract: one whose pages,
counted from the stretch's start, exceed the free plus evictable pages then. The new-token ratio
decays once per decode batch; `in_flight_plan` builds the in-flight decode plan with its
request-pool slots and future-token slots.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..baselines.fastforward import BaselineFastForward
from ..request import Request, RequestStatus
from .plan import SGLangStepPlan


class SGLangFastForward(BaselineFastForward):
    """The overlap scheduler's steady state, horizon, KV replay, counters and in-flight plan."""

    def steady_running(self, depth: int) -> list[Request] | None:
        """Running requests if the next iterations are plain decode batches of all of them."""
        p = self.policy
        if depth != p.max_concurrent_batches or not p.running or (p.waiting and not p.batch_is_full):
            return None
        if (
            p.preempted_req_ids
            or p.chunked_req is not None
            or p.last_extend_reqs
            or p.intake_aborts
            or len(p.running) + len(p.waiting) != len(p.requests)
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

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """With the batch full, an arrival waits unseen (`get_new_batch_prefill` returns at once)
        unless its prompt is long enough for the intake to abort it, which the next update reports."""
        p = self.policy
        full: bool = p.batch_is_full
        limit: int = p.max_req_input_len
        return full and longest_prompt < limit

    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations before a length cap drops a request or a step's pages, counted from the
        start, exceed the free and evictable pages (that step would retract)."""
        k = limit
        max_model_len: int = self.config.max_model_len
        caps = self._max_new_all(reqs)
        for j in range(len(reqs)):
            r = reqs[j]
            out = len(r.output_token_ids)
            k = min(k, caps[j] - out - 1, max_model_len - r.prompt_len - out - 1)
        if k <= 0:
            return 0
        kv = self.kv
        bs, tables = kv.block_size, kv.req_to_blocks
        offsets: list[int] = []
        for r in reqs:
            first = len(tables[r.request_id]) * bs - r.num_computed_tokens
            offsets.extend(range(max(first, 0), k, bs))
        room = kv.num_free_blocks + self.policy.tree_cache.evictable_units
        if len(offsets) > room:
            offsets.sort()
            k = min(k, offsets[room])
        return k

    def _replay_kv(
        self,
        reqs: list[Request],
        k: int,
        tokens: list[list[int]],
        out0: list[int],
        skipped: Sequence[Request] = (),
    ) -> list[float]:
        """The k steps' evictions and page allocations in step order; the KV usage after each
        schedule (pages neither free nor evictable, which evictions do not change)."""
        kv, mem = self.kv, self.policy.mem
        tree, bs, n = mem.tree_cache, kv.block_size, len(reqs)
        cs = [r.num_computed_tokens for r in reqs]
        events: list[tuple[int, int]] = []
        for idx in range(n):
            first = len(kv.req_to_blocks[reqs[idx].request_id]) * bs - cs[idx]
            events.extend((i, idx) for i in range(max(first, 0), k, bs))
        events.sort()
        usable = kv.pool.num_usable_blocks
        room0 = kv.num_free_blocks + tree.evictable_units
        usage: list[float] = []
        step, taken = 0, 0
        self._evict_for_step(n)
        for i, idx in events:
            while step < i:  # steps before i allocate nothing more
                usage.append((usable - room0 + taken) / usable)
                step += 1
                self._evict_for_step(n)
            r = reqs[idx]
            r.num_computed_tokens = cs[idx] + i
            if kv.allocate_slots(r, 1, has_scheduled_reqs=False) is None:
                raise AssertionError(f"fast-forward: {r.request_id} found no page inside its horizon")
            taken += 1
        while step < k:
            usage.append((usable - room0 + taken) / usable)
            step += 1
            if step < k:
                self._evict_for_step(n)
        return usage

    def _evict_for_step(self, n: int) -> None:
        """A decode step of n requests first makes one page per request free (if it can)."""
        self.policy.mem.evict_from_tree_cache(n * self.policy.mem.page_size)

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
