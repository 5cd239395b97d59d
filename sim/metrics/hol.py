"""Head-of-line blocking time: waiting while a request ahead blocked admission and this one would fit.

After each schedule() that preempted nothing and left both seats (max_num_seqs) and token budget,
the request at the head of the waiting queue was not admitted: it is blocked (by KV space, or by
its size without chunked prefill). Every never-scheduled request behind it whose prompt (its first
chunk, with chunked prefill) would fit in the leftover budget and the free KV blocks is charged the
time until the next schedule(). Preempted requests waiting to resume sit at the front of the queue
(vLLM prepends them), so while any exists every never-scheduled request is behind a blocker.
The queue order is arrival order, or (priority, arrival) for the priority policy. Vectorised over
the waiting window, so overloaded runs with long queues stay cheap; a judgement of an unchanged
queue under an unchanged size limit keeps the blocked set as it is.
"""

from __future__ import annotations

import numpy as np
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import StepPlan

EVERYONE = 1 << 62  # the size limit when every waiting request would fit
NOT_WAITING = EVERYONE + 1  # a size no limit admits
NO_JUDGEMENT = (-1, False, -1)  # no queue version is -1: the next judgement judges afresh


class HeadOfLineTracker:
    """Keeps the waiting window in arrival order and charges HOL time step by step."""

    def __init__(
        self,
        workload: WorkloadColumns,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        chunked: bool,
        block_size: int,
        usable_blocks: int,
        priority: bool,
    ) -> None:
        n = len(workload)
        self.order = np.argsort(workload.arrival, kind="stable")  # rank -> workload index
        self.rank = np.empty(n, dtype=np.int64)
        self.rank[self.order] = np.arange(n)
        self.prompt = np.asarray(workload.prompt, dtype=np.int64)[self.order]
        self.prio = np.asarray(workload.priority, dtype=np.int64)[self.order]
        self.waiting = np.zeros(n, dtype=bool)
        # the prompt of each waiting request, NOT_WAITING for the others: one comparison with the
        # size limit finds who is waiting and fits
        self.size = np.full(n, NOT_WAITING, dtype=np.int64)
        self.hol = np.zeros(n, dtype=float)
        self.count = self.lo = self.hi = 0
        self.seats, self.budget, self.chunked = max_num_seqs, max_num_batched_tokens, chunked
        self.block_size, self.usable, self.priority = block_size, usable_blocks, priority
        self.preempted: dict[str, None] = {}
        # the blocked requests: offsets into `pending_hol`, the HOL seconds from a rank on
        self.pending: np.ndarray | None = None
        self.pending_hol = self.hol
        self.add_at = np.add.at  # (bound once: a charge is one call, no attribute lookups)
        self.since = 0.0
        # the last judgement: the queue it saw (`version`, bumped when the queue changes), whether
        # preempted requests waited, and the size limit it applied (NO_JUDGEMENT: it judged nobody
        # blocked)
        self.version = 0
        self.judged = NO_JUDGEMENT

    def added(self, idx: int) -> None:
        """A request reached the engine."""
        r = int(self.rank[idx])
        if not self.waiting[r]:
            self.waiting[r] = True
            self.size[r] = self.prompt[r]
            self.lo = min(self.lo, r) if self.count else r  # lo is always a waiting request's rank
            self.count += 1
            self.version += 1
            self.hi = max(self.hi, r + 1)

    def left(self, idx: int) -> None:
        """A request was scheduled for the first time, or finished without ever running."""
        r = int(self.rank[idx])
        if self.waiting[r]:
            self.waiting[r] = False
            self.size[r] = NOT_WAITING
            self.count -= 1
            self.version += 1
        while self.lo < self.hi and not self.waiting[self.lo]:
            self.lo += 1

    def step(self, now: float, plan: StepPlan, running: int, kv_usage: float) -> None:
        """Charge the interval since the previous schedule, then judge who is blocked now."""
        for rid in plan.resumed_req_ids:
            self.preempted.pop(rid, None)
        for rid in plan.preempted_req_ids:
            self.preempted[rid] = None
        self.judge(now, plan.total_num_scheduled_tokens, running, kv_usage, bool(plan.preempted_req_ids))

    def charge(self, now: float) -> None:
        """Charge the blocked requests the interval since the previous schedule."""
        if self.pending is not None:  # one call; `hol[p] += d` makes three
            self.add_at(self.pending_hol, self.pending, now - self.since)
        self.since = now

    def judge(
        self, now: float, num_scheduled: int, running: int, kv_usage: float, preempted: bool = False
    ) -> None:
        """After a schedule of num_scheduled tokens (`preempted`: it preempted some): charge the
        interval before it, then find who is blocked until the next one."""
        self.charge(now)
        budget = self.budget - num_scheduled
        if self.count == 0 or preempted or running >= self.seats or budget <= 0:
            self.pending, self.judged = None, NO_JUDGEMENT
            return
        free_tokens = int((1.0 - kv_usage) * self.usable + 1e-9) * self.block_size
        # who fits: with chunked prefill a first chunk of min(prompt, budget) tokens needs free
        # KV (everyone fits when the budget does), without it the whole prompt needs both
        if self.chunked and budget <= free_tokens:
            limit = EVERYONE
        else:
            limit = free_tokens if self.chunked else min(budget, free_tokens)
        seen = (self.version, bool(self.preempted), limit)
        if seen == self.judged:
            return  # the same queue under the same limit: the same blocked set
        self.judged = seen
        self.pending = None
        lo, hi = self.lo, self.hi
        if not self.preempted and not self.priority:
            lo += 1  # the head of the queue (at lo) is the blocker, not blocked behind one
        fits = self.size[lo:hi] <= limit
        if not self.preempted and self.priority:
            fits[self._head(lo, hi)] = False
        hit = fits.nonzero()[0]  # the array methods: numpy's module functions add a Python call
        if len(hit):
            self.pending, self.pending_hol = hit, self.hol[lo:]

    def _head(self, lo: int, hi: int) -> int:
        """Window offset of the first request in (priority, arrival) order."""
        prio = np.where(self.waiting[lo:hi], self.prio[lo:hi], np.iinfo(np.int64).max)
        return int(prio.argmin())  # ties: the earliest arrival (argmin takes the first)

    def per_request(self) -> np.ndarray:
        """HOL seconds in workload order."""
        out = np.empty_like(self.hol)
        out[self.order] = self.hol
        return out
