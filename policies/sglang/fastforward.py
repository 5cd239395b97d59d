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
calls in step order. Right after a request leaves, the batch is open again and the next
schedule's prefill pass looks at the queue: a stretch may start there when that pass is certain
to form nothing and mark the batch full (no seat or request-pool row, or the queue's head refused
for KV with its prefix lock counted, `refuses_for_kv`), and when it reads only the queue's first
requests in queue order, so that arrivals cannot change it. `advance` then runs that pass for
real first: its lookup of the head stamps the tree's recency and may split a node, which the
evictions after it read. The horizon stops before a step that would retract: one whose pages,
counted from the stretch's start, exceed the free plus evictable pages then; a length cap ends
the stretch before its last update, while an EOS may arrive in it: `finish` stops those requests
there as `update_from_output` does (the tree takes their tokens, their rows and pages go, the
batch opens). The new-token ratio
decays once per decode batch; `in_flight_plan` builds the in-flight decode plan with its
request-pool slots and future-token slots.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..baselines.fastforward import BaselineFastForward
from ..fastforward import allocation_events, allocations_before, first_step_past
from ..request import Request, RequestStatus
from .adder import AddReqResult, PrefillAdder
from .plan import SGLangStepPlan


class SGLangFastForward(BaselineFastForward):
    """The overlap scheduler's steady state, horizon, KV replay, counters and in-flight plan."""

    # the stretch's first schedule runs a prefill pass that forms nothing and fills the batch
    fills_batch: bool = False

    def steady_running(self, depth: int) -> list[Request] | None:
        """Running requests if the next iterations are plain decode batches of all of them."""
        p = self.policy
        self.fills_batch = False
        if depth != p.max_concurrent_batches or not p.running:
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
        # the prefill pass first (after a finish it is the usual no), then the scan of the batch
        fills = bool(p.waiting) and not p.batch_is_full
        if fills and not self._prefill_fills_batch():
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
        self.fills_batch = fills
        return running

    def _prefill_fills_batch(self) -> bool:
        """Whether the next schedule's prefill pass forms no batch and marks the batch full: no
        request may join (no seat or request-pool row), or the queue's first request (past those
        whose dropped output is still in flight) is refused for KV (NO_TOKEN) with nothing
        admitted before it. That pass reads nothing that a request joining the back changes."""
        p = self.policy
        running_bs = len(p.running)
        if p.num_allocatable(running_bs, 0) <= 0:
            return True
        if not p.policy.reads_head_only(len(p.waiting)):
            return False
        head = next((r for r in p.waiting if r.num_stale_output_tokens == 0), None)
        if head is None:
            return False
        mixed = running_bs if p.config.enable_mixed_chunk else 0
        adder = PrefillAdder(p.config, p.mem, p.running, p.ratio.current, mixed, p.max_new)
        if adder.budget_state() == AddReqResult.OTHER:
            return False  # the pass stops before the head and leaves the batch open
        prefix, locked = p.mem.peek_kv_cache(head, max(head.num_tokens - 1, 0))
        return adder.refuses_for_kv(head, prefix, locked)

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """With the batch full, an arrival waits unseen (`get_new_batch_prefill` returns at once)
        unless its prompt is long enough for the intake to abort it, which the next update reports."""
        p = self.policy
        full: bool = p.batch_is_full or self.fills_batch
        limit: int = p.max_req_input_len
        return full and longest_prompt < limit

    def advance(
        self, reqs: list[Request], k: int, tokens: list[list[int]], skipped: Sequence[Request] = ()
    ) -> list[float]:
        """The first schedule's prefill pass runs for real where it fills the batch (its lookup of
        the queue's head refreshes the tree's recency and may split a node), then the decodes."""
        if self.fills_batch:
            self.fills_batch = False
            p = self.policy
            if p.get_new_batch_prefill(SGLangStepPlan()) or not p.batch_is_full:
                raise AssertionError("fast-forward: the first schedule's prefill pass left the batch open")
        return super().advance(reqs, k, tokens, skipped)

    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations before a length cap drops a request or a step's pages, counted from the
        start, exceed the free and evictable pages (that step would retract)."""
        k = limit
        max_model_len: int = self.config.max_model_len
        for r in reqs:
            out = len(r.output_token_ids)
            # a cap: the last update (two-argument min: compiled, a third makes it a generic call)
            k = min(min(k, self._max_new(r) - out), max_model_len - r.prompt_len - out - 1)
        if k <= 0:
            return 0
        kv = self.kv
        bs, tables = kv.block_size, kv.req_to_blocks
        # request j takes a page every bs steps from firsts[j] (its current page full then)
        firsts = [max(len(tables[r.request_id]) * bs - r.num_computed_tokens, 0) for r in reqs]
        room = kv.num_free_blocks + self.policy.tree_cache.evictable_units
        if allocations_before(firsts, k, bs) > room:
            k = first_step_past(firsts, k, bs, room)
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
        left_out = set(skipped)  # not in the last batch: no page for its step
        firsts = [max(len(kv.req_to_blocks[r.request_id]) * bs - r.num_computed_tokens, 0) for r in reqs]
        stops = [k - 1 if r in left_out else k for r in reqs]
        events = allocation_events(firsts, stops, bs)
        usable = kv.pool.num_usable_blocks
        room0 = kv.num_free_blocks + tree.evictable_units
        usage: list[float] = []
        step, taken = 0, 0
        self._evict_for_step(n if k > 1 else n - len(skipped))
        for i, idx in events:
            while step < i:  # steps before i allocate nothing more
                usage.append((usable - room0 + taken) / usable)
                step += 1
                self._evict_for_step(n if step < k - 1 else n - len(skipped))
            r = reqs[idx]
            c = r.num_computed_tokens  # as the stretch found it: restored after the allocation
            r.num_computed_tokens = c + i  # (advance sets every request's once the replay is done)
            if kv.allocate_slots(r, 1, has_scheduled_reqs=False) is None:
                raise AssertionError(f"fast-forward: {r.request_id} found no page inside its horizon")
            r.num_computed_tokens = c
            taken += 1
        while step < k:
            usage.append((usable - room0 + taken) / usable)
            step += 1
            if step < k:
                self._evict_for_step(n if step < k - 1 else n - len(skipped))
        return usage

    def skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """Overlap: the last schedule drops a request whose in-flight output reaches its cap
        (`_drop_finishing`); the last update then stops it."""
        if not self.lag or not self.policy.config.enable_skip_finishing_decode:
            return []
        return [r for r in reqs if len(r.output_token_ids) + k >= self._max_new(r)]

    def _skipped_update(self, r: Request) -> None:
        """`_drop_finishing` took it out of the running batch, which is open again."""
        p = self.policy
        p.running = [x for x in p.running if x is not r]
        p.batch_is_full = False

    def _evict_for_step(self, n: int) -> None:
        """A decode step of n requests first makes one page per request free (if it can)."""
        self.policy.mem.evict_from_tree_cache(n * self.policy.mem.page_size)

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """The plan counter, and one new-token-ratio decay per decode batch."""
        p = self.policy
        p.step_id += k
        for _i in range(k):
            p.ratio.decay_step()

    def in_flight_plan(self, reqs: list[Request]) -> SGLangStepPlan:
        """The decode plan the stretch's last schedule() made (it stays in flight after the jump)."""
        slots: dict[str, int] = self.policy.pool.slot_of  # (typed: the policy is read as Any)
        plan = SGLangStepPlan(step_id=self.policy.step_id - 1, forward_mode="decode")
        scheduled = plan.num_scheduled_tokens
        for r in reqs:
            scheduled[r.request_id] = 1
        # the other tables have the same keys: copies of it, overwritten, cost less than fresh
        # inserts (no resizing)
        plan.context_lens = context = scheduled.copy()
        plan.req_pool_indices = pool = scheduled.copy()
        for r in reqs:
            rid = r.request_id
            context[rid] = r.num_computed_tokens - 1
            pool[rid] = slots[rid]
        if self.lag:
            plan.future_token_slots = pool.copy()  # every input token is still in flight
        plan.total_num_scheduled_tokens = len(reqs)
        plan.block_table = self.kv.get_block_ids
        plan.finished_req_ids = []
        plan.preempted_req_ids = []
        return plan
