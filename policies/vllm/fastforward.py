"""Exact fast-forward hooks of the vLLM policies: steady decode stretches in closed form.

A stretch is a run of engine-loop iterations in which `schedule()` gives every running request
exactly one token and `update_from_output` finishes none. The simulator (`schedsim.fastforward`)
asks `ff_running` whether the policy is in that steady state, `ff_horizon` how many iterations its
own caps (max_tokens, max_model_len, free KV blocks) allow, and `ff_advance` to apply k iterations
at once. The KV work of those iterations (new blocks at block boundaries, prefix-cache publishing
of filled blocks) is replayed through the real `KVCacheManager` calls, in the order step-by-step
scheduling makes them (iteration, then schedule before update, then running order), at exactly the
iterations where the inlined fast path of `_schedule_running` would not apply: free-queue order,
evictions and hashes come out identical.

Supported: `vllm` with one batch in flight and `vllm-async` with two (the engines' defaults).
"""

from __future__ import annotations

from ..plan import StepPlan
from ..request import Request, RequestStatus


class FastForwardMixin:
    """ff_running / ff_horizon / ff_advance for VllmScheduler and VllmAsyncScheduler."""

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
            if (r.status != running_status or r.num_output_placeholders != lag
                    or r.num_in_flight_tokens != lag or r.num_stale_output_tokens
                    or r.structured_output or r.stop_token_ids or r.num_spec_tokens
                    or (r.spec_token_ids and not self.is_async)
                    or r.num_computed_tokens != r.prompt_len + len(r.output_token_ids) - 1 + lag):
                return None
        return self.running

    def ff_horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations (<= limit) before a length cap finishes a request or a block runs short."""
        cfg = self.config
        k = limit
        for r in reqs:
            out = len(r.output_token_ids)
            k = min(k, r.max_tokens - out - 1, cfg.max_model_len - r.prompt_len - out - 1)
        if k <= 0:
            return 0
        bs, tables = self.kv.block_size, self.kv.req_to_blocks
        offsets: list[int] = []  # iterations at which some request needs a new block
        for r in reqs:
            # schedule i needs cdiv(C + i + 1, bs) blocks: a new one when C + i == blocks * bs
            first = len(tables[r.request_id]) * bs - r.num_computed_tokens
            offsets.extend(range(max(first, 0), k, bs))
        free = self.kv.num_free_blocks
        if sum(1 for x in offsets if x == 0) > free:
            return 0
        free += self._ff_released_blocks()  # fenced frees come back in the first update
        if len(offsets) > free:
            offsets.sort()
            k = min(k, offsets[free])  # that schedule would preempt: stop before it
        return k

    def _ff_released_blocks(self) -> int:
        """Blocks of deferred frees the first iteration's end_step releases; -1 if some stay fenced.

        A request finished in the update of the iteration before the stretch is fenced by the
        step scheduled in that iteration, whose update is the stretch's first.
        """
        kv = self.kv
        fence = kv.processed_step_seq + 1
        if not self.config.defer_block_free:
            return 0
        n = 0
        for seq, blocks in kv.deferred_frees:
            if seq > fence:
                return -1
            n += len(blocks)
        return n

    def ff_advance(self, reqs: list[Request], k: int, tokens: list[list[int]]) -> list[float]:
        """Apply k iterations; tokens[r] are request r's next k delivered tokens.

        Returns the KV usage seen after each of the k schedules.
        """
        kv = self.kv
        usage_after = self._ff_replay_kv(reqs, k, tokens)
        lag = self.max_concurrent_batches - 1
        placeholders = getattr(self, "_spec_placeholders", None)
        for r, toks in zip(reqs, tokens, strict=True):
            r.output_token_ids.extend(toks[len(r.output_token_ids) - self._ff_out0[r.request_id]:])
            r.num_computed_tokens = r.prompt_len + len(r.output_token_ids) - 1 + lag
            r.is_prefill_chunk = False
            if placeholders is not None:
                r.spec_token_ids = placeholders
        self.current_step += k
        self.finished_req_ids = []  # the first schedule reported them
        if self.config.defer_block_free:
            kv.sched_step_seq += k
            kv.processed_step_seq += k - 1  # the first end_step ran inside the replay
            for r in reqs:
                r.last_sched_seq = kv.sched_step_seq
        self._ff_out0 = {}
        return usage_after

    def ff_plan(self, reqs: list[Request]) -> StepPlan:
        """The plan the last schedule() of a stretch made (it stays in flight after the jump)."""
        tables = self.kv.req_to_blocks
        return StepPlan(
            step_id=self.current_step - 1,
            num_scheduled_tokens={r.request_id: 1 for r in reqs},
            total_num_scheduled_tokens=len(reqs),
            context_lens={r.request_id: r.num_computed_tokens - 1 for r in reqs},
            spec_decode_tokens={},
            block_ids={r.request_id: tables[r.request_id] for r in reqs},
            new_req_ids=[], resumed_req_ids=[], preempted_req_ids=[], finished_req_ids=[])

    # ---- KV replay ----
    def _ff_replay_kv(self, reqs: list[Request], k: int, tokens: list[list[int]]) -> list[float]:
        """Run the allocations and cache publications of k iterations through the real manager."""
        kv, bs, lag = self.kv, self.kv.block_size, self.max_concurrent_batches - 1
        caching = kv.enable_caching
        start = [(r, r.num_computed_tokens, len(r.output_token_ids)) for r in reqs]
        self._ff_out0 = {r.request_id: out for r, _, out in start}
        # Candidates: iteration 0, then every iteration at which a block boundary moves the fast
        # path's test: C + i == m * bs (a new block; async: also a newly full block to publish)
        # and, sync only, C + i + 1 == m * bs (a newly full block). Between candidates the test's
        # quantities do not change and blocks and cached counts only grow, so it stays true.
        # An async update publishes `done` = C + i blocks, which its own iteration's schedule has
        # already published (same boundary, schedule first): update events are never needed.
        events: list[tuple[int, int]] = [(0, idx) for idx in range(len(start))]
        for idx, (_, c, _) in enumerate(start):
            events.extend((i, idx) for i in range((-c) % bs or bs, k, bs))
            if not lag:
                events.extend((i, idx) for i in range((-c - 1) % bs or bs, k, bs))
        events.append((1, -1))  # after iteration 0's schedule: its update's end_step (fences)
        events.sort()
        free0 = kv.num_free_blocks
        free_counts: list[tuple[int, int]] = []  # (iteration, free blocks after its schedule)
        tables, cached, kv_len = kv.req_to_blocks, kv.num_cached_block, kv.max_model_len
        fenced = self.config.defer_block_free
        for i, idx in events:
            if idx < 0:
                if fenced:
                    kv.end_step()  # the first update: releases what it fences
                    free_counts.append((1, kv.num_free_blocks))
                continue
            r, c, out0 = start[idx]
            total = c + i + 1
            n = r.prompt_len + out0 + i  # known tokens at this schedule (i outputs delivered since)
            rid = r.request_id
            if (-(-min(total, kv_len) // bs) <= len(tables[rid])
                    and (not caching or min(total, n) // bs <= cached.get(rid, 0))):
                continue  # _schedule_running's inlined fast path: nothing to do
            self._ff_set(r, out0, i, tokens[idx])
            r.num_computed_tokens = c + i
            if not kv.append_slots(r, 1):
                raise AssertionError(f"fast-forward: {rid} found no free block inside its horizon")
            free_counts.append((i, kv.num_free_blocks))
        return self._usage_per_step(k, free0, free_counts)

    def _ff_set(self, r: Request, out0: int, delivered: int, toks: list[int]) -> None:
        """Bring the request's output list to out0 + delivered tokens (hashes read them)."""
        have = len(r.output_token_ids) - out0
        if delivered > have:
            r.output_token_ids.extend(toks[have:delivered])

    def _usage_per_step(self, k: int, free0: int, free_counts: list[tuple[int, int]]) -> list[float]:
        """KV usage after each schedule, from the free-block count (BlockPool.usage's formula)."""
        usable = self.kv.pool.num_gpu_blocks - 1
        changes = dict(free_counts)  # the last change within an iteration wins
        out = [0.0] * k
        free = free0
        for i in range(k):
            free = changes.get(i, free)
            out[i] = 1.0 - free / usable
        return out
