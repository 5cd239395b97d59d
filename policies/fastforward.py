"""Exact fast-forward, the policy side shared by every policy that supports it.

A policy that declares `SupportsFastForward` hands out a companion built on `FastForwardBase`,
which implements `FastForwardHooks` (schedsim.policies.interface) over the policy's state: the
scheduler class itself carries none of this. A stretch is a run of engine-loop iterations in
which `schedule()` gives every running request exactly one token and `update_from_output`
finishes none; the simulator (`schedsim.fastforward`) asks `steady_running` whether the policy is
in that state, `horizon` how many iterations its own caps (output-length and max_model_len
stops, free KV blocks) allow, and `advance` to apply k iterations at once. The KV work of those
iterations (new blocks at block boundaries, prefix-cache publishing of filled blocks) is
replayed through the real `KVCacheManager` calls the policy makes, in the order step-by-step
scheduling makes them (iteration, then schedule before update, then running order), at every
iteration where they can change anything: free-queue order, evictions and hashes come out
identical.

A policy family's companion supplies `steady_running`, `_max_new` (its output-length cap),
`_sched_kv` (its schedule-time KV call for one decode token) and `_after_advance` (its step
counters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from .kv_cache import KVCacheManager
from .kv_cache.block_pool import NULL_BLOCK_ID
from .kv_cache.hashing import private_from
from .plan import RequestOutput, StepPlan
from .request import Request, RequestStatus


class HeadDemand:
    """How a family's schedule asks the pool for the waiting queue's head (`_head_blocked`).

    A plain class, not a dataclass: one is built at every certificate, and a compiled
    dataclass's generated `__init__` stays interpreted code.
    """

    def __init__(
        self,
        least_budget: int,
        most_budget: int,
        chunked: bool,
        threshold: int = 0,
        lookahead: int = 0,
        full_must_fit: bool = False,
    ) -> None:
        self.least_budget = least_budget  # the fewest tokens any schedule of the stretch leaves for it
        self.most_budget = most_budget  # the most
        self.chunked = chunked  # a prompt over the budget gets a chunk of it (else it waits)
        self.threshold = threshold  # long_prefill_token_threshold, the least any schedule uses (0: none)
        self.lookahead = lookahead  # slots reserved beyond the scheduled tokens
        self.full_must_fit = full_must_fit  # the whole known sequence must fit (scheduler_reserve_full_isl)


@mypyc_attr(allow_interpreted_subclasses=True)  # the baselines, SGLang and TensorRT-LLM extend it
class FastForwardBase:
    """horizon / advance and the KV replay over one policy; see the module docstring."""

    # A family whose `finish` applies the last update's stops lets a stretch end with it.
    finishes_in_last_update = False

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.config: Any = policy.config
        self.kv: KVCacheManager = policy.kv
        # outputs in flight per request in the steady state: 0 sync, 1 with two batches
        self.lag: int = policy.max_concurrent_batches - 1
        self.waiters_stay = False  # the last steady_running's answer to arrivals_wait

    def steady_running(self, depth: int) -> list[Request] | None:
        """The running requests if the next iterations are plain decodes of each, else None."""
        return None

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """Whether arrivals inside the stretch wait through it (the last `_blocked_queue` says)."""
        return self.waiters_stay

    def _blocked_queue(
        self, head: Request, running: list[Request], seats: int, demand: HeadDemand | None
    ) -> bool:
        """Whether no schedule of the stretch admits a waiting request: every seat is taken, or
        the queue's head (waiting or preempted, nothing stale, no grammar, holding no blocks) gets
        no blocks as `demand` asks (`_head_blocked`; None: the family cannot tell). Sets
        `waiters_stay`: under FCFS an arrival joins behind that head, so it waits too."""
        if len(running) >= seats:
            self.waiters_stay = True
            return True
        if (
            demand is None
            or head.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            or head.num_computed_tokens
            or head.num_stale_output_tokens
            or head.structured_output
            or self.kv.get_block_ids(head.request_id)
            or not self._head_blocked(head, running, demand)
        ):
            return False
        self.waiters_stay = self.config.scheduling_policy == "fcfs"
        return True

    def _head_blocked(self, head: Request, running: list[Request], demand: HeadDemand) -> bool:
        """Whether the queue's head gets no blocks in any schedule of the stretch, however many
        the stretch frees (only the first update may release fenced ones) and however its prefix
        hit changes: a hit block in the free queue may be evicted by a decode's allocation, which
        cuts the hit there (every cut is tried), and a hit never grows (`_hits_cannot_grow`)."""
        kv = self.kv
        hit, _ = kv.get_computed_blocks(head)  # the lookup the first schedule makes anyway
        free = kv.num_free_blocks + max(self._released_blocks(), 0)
        ref_cnt, bs = kv.pool.ref_cnt, kv.block_size
        max_model_len: int = self.config.max_model_len
        # a cut at hit block j keeps the blocks before it, as many evictable as cuts before it
        cuts = [j for j in range(len(hit)) if ref_cnt[hit[j]] == 0]
        cuts.append(len(hit))
        for evictable in range(len(cuts)):
            j = cuts[evictable]
            num_new = head.num_tokens - j * bs
            if 0 < demand.threshold < num_new:
                num_new = demand.threshold
            if num_new > demand.least_budget:
                if demand.chunked:
                    num_new = demand.least_budget  # fewer tokens never need more blocks
                elif num_new > demand.most_budget:
                    continue  # over every schedule's budget: it waits at this cut
            need = min(j * bs + num_new + demand.lookahead, max_model_len)
            if kv.fits(head, need, j, evictable, demand.full_must_fit, True, free):
                return False
        return self._hits_cannot_grow(head, len(hit), running)  # (last: the one pass over the batch)

    def _hits_cannot_grow(self, head: Request, h: int, running: list[Request]) -> bool:
        """No running request can publish a block that extends the head's prefix hit of h blocks:
        the head's block h is its own (only the head, which runs nothing, could publish it), or
        each running request's blocks up to h are published already, or all it publishes from
        now on is private (outside the hash map; KVCacheManager's lazy_private)."""
        kv = self.kv
        cached, bs = kv.num_cached_block, kv.block_size
        if h >= private_from(head, bs):
            return True
        for r in running:
            if cached.get(r.request_id, 0) <= h and h < private_from(r, bs):
                return False
        return True

    def reported_finished_ids(self) -> list[str]:
        """Finished ids the next plan reports."""
        ids: list[str] = self.policy.finished_req_ids
        return ids

    def has_request(self, request_id: str) -> bool:
        """Whether the policy still tracks the request."""
        return request_id in self.policy.requests

    def finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """The last update's stops (families with finishes_in_last_update)."""
        raise NotImplementedError

    def in_flight_plan(self, reqs: list[Request]) -> StepPlan:
        """The plan the stretch's last schedule() made (families with two batches in flight)."""
        raise NotImplementedError

    def end_stretch(self) -> None:
        """Waiting requests stay where they are (their queue is the scheduler's own)."""

    def _max_new(self, r: Request) -> int:
        """The output length at which the policy stops a request."""
        return r.max_tokens

    def _sched_kv(self, r: Request, total: int, known: int, out0: int, i: int, toks: list[int]) -> bool:
        """The schedule-time KV call for one decode token (total = C + i + 1); True if it changed
        the pool, free queue or cache. `_set_outputs(r, out0, i, toks)` first if it reads the
        outputs."""
        raise NotImplementedError

    def _first_kv(self, reqs: list[Request], cs: list[int], out0: list[int]) -> list[bool]:
        """Which requests' first schedule of the stretch needs the KV call (total = C + 1 tokens,
        known = prompt + out0): all of them, unless the family can tell cheaply (one call)."""
        return [True] * len(reqs)

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """Step counters and per-request fields after k iterations."""

    def _clear_reported_finishes(self) -> None:
        """The stretch's first plan reported the finished ids: the next reports none."""
        self.policy.finished_req_ids = []

    def _skipped_update(self, r: Request) -> None:
        """The last update's KV work for a request the last schedule left out (none by default)."""

    def skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """Requests the k-th (last) schedule of a stretch leaves out (none by default)."""
        return []

    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations (<= limit) before a length cap finishes a request or a block runs short."""
        max_model_len: int = self.config.max_model_len
        k = limit
        fin = 0 if self.finishes_in_last_update else -1  # may the last update reach the output cap?
        for r in reqs:
            out = len(r.output_token_ids)
            k = min(k, self._max_new(r) - out + fin)  # (compiled: a native call, no boxed cap)
            k = min(k, max_model_len - r.prompt_len - out - 1)
        if k <= 0:
            return 0
        kv = self.kv
        bs, tables = kv.block_size, kv.req_to_blocks
        # schedule i needs cdiv(C + i + 1, bs) blocks: a new one when C + i == blocks * bs, i.e.
        # at first, first + bs, ... (first = blocks * bs - C); count them before listing them
        firsts: list[int] = []
        total = at_zero = 0
        for r in reqs:
            first = max(len(tables[r.request_id]) * bs - r.num_computed_tokens, 0)
            firsts.append(first)
            if first < k:
                total += (k - first + bs - 1) // bs
                at_zero += first == 0
        free = kv.num_free_blocks
        if at_zero > free:
            return 0
        released = self._released_blocks()  # fenced frees come back in the first update
        if released < 0:
            return 0  # some stay fenced past it: the family's steady_running should have said so
        free += released
        if total > free:  # some schedule would preempt: stop before the first such one
            offsets = [x for first in firsts for x in range(first, k, bs)]
            offsets.sort()
            k = min(k, offsets[free])
        return k

    def _released_blocks(self) -> int:
        """Blocks of deferred frees the first iteration's end_step releases; -1 if some stay fenced.

        A request finished in the update of the iteration before the stretch is fenced by the
        step scheduled in that iteration, whose update is the stretch's first.
        """
        kv = self.kv
        fence = kv.processed_step_seq + 1
        if not getattr(self.config, "defer_block_free", False):
            return 0
        # a release drops one reference per listed block: only a block whose last references go
        # (not one a running request shares through a prefix hit) comes back free
        drops: dict[int, int] = {}
        for seq, blocks in kv.deferred_frees:
            if seq > fence:
                return -1
            for b in blocks:
                if b != NULL_BLOCK_ID:
                    drops[b] = drops.get(b, 0) + 1
        ref_cnt = kv.pool.ref_cnt
        n = 0
        for b, d in drops.items():
            if ref_cnt[b] == d:
                n += 1
        return n

    def advance(
        self, reqs: list[Request], k: int, tokens: list[list[int]], skipped: Sequence[Request] = ()
    ) -> list[float]:
        """Apply k iterations; tokens[r] are request r's next k delivered tokens; the last
        schedule leaves out `skipped` (skipped_last).

        Returns the KV usage seen after each of the k schedules.
        """
        kv = self.kv
        out0 = [len(r.output_token_ids) for r in reqs]
        usage_after = self._replay_kv(reqs, k, tokens, out0, skipped)
        lag = self.lag
        for j in range(len(reqs)):
            r = reqs[j]
            outs, added = r.output_token_ids, len(r.output_token_ids) - out0[j]
            outs.extend(tokens[j][added:] if added else tokens[j])  # the replay added `added`
            r.num_computed_tokens = r.prompt_len + len(r.output_token_ids) - 1 + lag
            r.num_in_flight_tokens = lag  # a prefill chunk in flight at the start has landed
            r.is_prefill_chunk = False
        self._clear_reported_finishes()
        fenced = getattr(self.config, "defer_block_free", False)
        if fenced:
            kv.sched_step_seq += k
            kv.processed_step_seq += k - 1  # the first end_step ran inside the replay
            for r in reqs:
                r.last_sched_seq = kv.sched_step_seq
        for r in skipped:  # scheduled k - 1 times; the last update took its in-flight output
            r.num_computed_tokens -= 1
            r.num_in_flight_tokens = r.num_output_placeholders = 0
            if fenced:
                r.last_sched_seq -= 1
            self._skipped_update(r)
        self._after_advance(reqs, k)
        return usage_after

    # ---- KV replay ----
    def _replay_kv(
        self,
        reqs: list[Request],
        k: int,
        tokens: list[list[int]],
        out0: list[int],
        skipped: Sequence[Request] = (),
    ) -> list[float]:
        """Run the allocations and cache publications of k iterations through the real manager."""
        kv, bs, lag = self.kv, self.kv.block_size, self.lag
        # Candidates: iteration 0, then every iteration at which a block boundary moves what the
        # KV call depends on: C + i == m * bs (a new block; async: also a newly full block to
        # publish) and, sync only, C + i + 1 == m * bs (a newly full block). Between candidates
        # those quantities do not change while blocks and cached counts only grow, so the call
        # would change nothing (the vLLM policies skip it by their fast path, holds_new_tokens;
        # the others find nothing to allocate or publish).
        # An async update publishes `done` = C + i blocks, which its own iteration's schedule has
        # already published (same boundary, schedule first): update events are never needed,
        # but for a request the last schedule leaves out (`_skipped_update`).
        # A request the last schedule leaves out has calls in the first k - 1 iterations only.
        # Events are encoded as ints, iteration * (n + 1) + request index + 1, and sorted as such:
        # 0 + 1 .. n within an iteration in running order; the first update's end_step is
        # (1, 0): after iteration 0's schedules, before iteration 1's.
        left_out = set(skipped)  # (requests hash by identity: no boxed id() per request)
        n = len(reqs)
        width = n + 1
        cs = [r.num_computed_tokens for r in reqs]
        first = self._first_kv(reqs, cs, out0)
        events: list[int] = [width]  # iteration 1, slot 0: the first update's end_step (fences)
        for idx in range(n):
            c = cs[idx]
            stop = k - 1 if left_out and reqs[idx] in left_out else k
            if stop > 0 and first[idx]:
                events.append(idx + 1)
            # (while loops: compiled, a range with a variable step is a generic object)
            i = (-c) % bs or bs
            while i < stop:
                events.append(i * width + idx + 1)
                i += bs
            if not lag:
                i = (-c - 1) % bs or bs
                while i < stop:
                    events.append(i * width + idx + 1)
                    i += bs
        events.sort()
        free0 = kv.num_free_blocks
        free_at: list[int] = []  # iterations whose schedule changed the free count, in order
        free_after: list[int] = []  # the free blocks after it
        fenced = getattr(self.config, "defer_block_free", False)
        for e in events:
            i = e // width  # (compiled: native, where divmod is a generic call)
            slot = e - i * width
            if slot == 0:
                if fenced:
                    kv.end_step()  # the first update: releases what it fences
                    free_at.append(1)
                    free_after.append(kv.num_free_blocks)
                continue
            idx = slot - 1
            r, c, n0 = reqs[idx], cs[idx], out0[idx]
            # known tokens at this schedule: i outputs delivered since the stretch began
            if self._sched_kv(r, c + i + 1, r.prompt_len + n0 + i, n0, i, tokens[idx]):
                free_at.append(i)
                free_after.append(kv.num_free_blocks)
        return self._usage_per_step(k, free0, free_at, free_after)

    def _set_outputs(self, r: Request, out0: int, delivered: int, toks: list[int]) -> None:
        """Bring the request's output list to out0 + delivered tokens (hashes read them)."""
        have = len(r.output_token_ids) - out0
        if delivered > have:
            r.output_token_ids.extend(toks[have:delivered])

    def _usage_per_step(self, k: int, free0: int, free_at: list[int], free_after: list[int]) -> list[float]:
        """KV usage after each schedule, from the free-block count (BlockPool.usage's formula)."""
        usable = self.kv.pool.num_gpu_blocks - 1
        out: list[float] = []
        free = free0
        usage: Any = 1.0 - free / usable  # (compiled: boxed once per change, not per iteration)
        j, m = 0, len(free_at)
        for i in range(k):
            if j < m and free_at[j] == i:
                while j < m and free_at[j] == i:  # the last change within an iteration wins
                    free = free_after[j]
                    j += 1
                usage = 1.0 - free / usable
            out.append(usage)
        return out


def allocations_before(firsts: list[int], t: int, every: int) -> int:
    """Allocations in the steps before t when request j allocates one block every `every` steps
    from step firsts[j] on (a decode crossing its block boundaries)."""
    total = 0
    for f in firsts:
        if f < t:
            total += (t - f + every - 1) // every
    return total


def allocation_events(firsts: list[int], stops: list[int], every: int) -> list[tuple[int, int]]:
    """(step, j) for each allocation of request j, one every `every` steps from firsts[j] up to
    stops[j] (excluded), in step order (request order within a step)."""
    events: list[tuple[int, int]] = []
    for j in range(len(firsts)):
        i = firsts[j]
        while i < stops[j]:  # (compiled: a range with a variable step is a generic object)
            events.append((i, j))
            i += every
    events.sort()
    return events


def first_step_past(firsts: list[int], t: int, every: int, room: int) -> int:
    """The first step (< t) whose allocation, counted from step 0, is more than `room`; the caller
    has seen that the steps before t make more. A bisection: the count only grows with the step."""
    lo, hi = 0, t - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if allocations_before(firsts, mid + 1, every) > room:
            hi = mid
        else:
            lo = mid + 1
    return lo
