"""Metrics recorder: the engine observer and world hooks, writing columnar buffers (no pandas here)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
from mypy_extensions import i64
from schedsim.metrics.column import Column
from schedsim.metrics.hol import HeadOfLineTracker
from schedsim.metrics.jumps import JumpChunks
from schedsim.metrics.rows import StepRows
from schedsim.metrics.runlength import RunLengths
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import Policy, Request, RequestOutput, RequestStatus, StepPlan, StepResult

NAN: Final = math.nan
# output_hash: two primes below 2^31 and their multipliers
HASH_P1: Final = 2147483647
HASH_P2: Final = 2147483629
HASH_M1: Final = 1000003
HASH_M2: Final = 998244353
FINISH_NAMES: Final = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_IGNORED: "ignored",
    RequestStatus.FINISHED_ERROR: "error",
}
STEP_FIELDS: Final = (
    "schedule_time",
    "start",
    "end",
    "gpu_time",
    "num_prefill_reqs",
    "num_decode_reqs",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_spec_tokens",
    "num_running",
    "num_waiting",
    "kv_usage",
    "num_preempted",
    "num_paused",
    "num_finished",
    "deferred_sampling",
)
ZERO_AT_SCHEDULE: Final = (
    "num_finished",
    "num_prefill_reqs",
    "num_decode_reqs",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_spec_tokens",
    "deferred_sampling",
)
RESOURCES = ("cpu", "gpu")
TIMELINE_KINDS = ("schedule", "prepare_inputs", "d2h_copy", "update_from_output", "forward")
RESOURCE_CODES: Final = {name: i for i, name in enumerate(RESOURCES)}
KIND_CODES: Final = {name: i for i, name in enumerate(TIMELINE_KINDS)}
# times in float64, counts in int32 (a 1M-request run has millions of steps)
STEP_TYPES: Final = {
    "schedule_time": "d",
    "start": "d",
    "end": "d",
    "gpu_time": "d",
    "kv_usage": "d",
    "deferred_sampling": "b",
}


COUNTERS: Final = ("num_preemptions", "num_pauses", "num_recomputed_tokens", "num_truncated_tokens")


class RequestBuffers:
    """Per-request columns, indexed by the request's position in the workload (8 bytes a value)."""

    def __init__(self, n: int) -> None:
        nan, zero = array("d", [NAN]), array("q", [0])
        self.first_sched, self.first_token, self.last_token, self.finish_time = (
            nan * n,
            nan * n,
            nan * n,
            nan * n,
        )
        self.finish_reason: list[str | None] = [None] * n
        self.num_out, self.cached, self.itl_n = zero * n, zero * n, zero * n
        self.itl_sum = array("d", [0.0]) * n
        self.out_hash = array("q", [-1]) * n  # set at finish, when the tokens are dropped
        self.counters = {name: zero * n for name in COUNTERS}  # copied when the Request is dropped


class LiveStats:
    """A live request's token counters: native fields while it runs (every step touches them),
    copied into the RequestBuffers columns when it is dropped."""

    __slots__ = ("row", "num_out", "first_token", "last_token", "itl_sum", "itl_n")

    def __init__(self, row: int) -> None:
        self.row = row
        self.num_out = 0
        self.first_token = NAN
        self.last_token = NAN
        self.itl_sum = 0.0
        self.itl_n = 0


class MetricsRecorder:
    """Observes the engine (see engine.EngineObserver) and the world's busy intervals."""

    def __init__(
        self,
        policy: Policy,
        workload: WorkloadColumns | Sequence[Request],
        clock: Callable[[], float],
        record_itl: bool = False,
    ) -> None:
        self.policy = policy
        self.clock = clock
        requests: list[Request] | None = None
        if isinstance(workload, WorkloadColumns):
            self.columns = workload
        else:  # ready-made Requests (the real backend's runs), admitted at once
            requests = list(workload)
            self.columns = WorkloadColumns.from_requests(requests)
        self.stats: dict[str, LiveStats] = {}  # live requests only: their workload row, counters
        self.live: dict[int, Request] = {}  # workload row -> its Request, until finished
        self.req = RequestBuffers(len(self.columns))
        self.itl_gaps = RunLengths()  # every inter-token gap, run-length encoded
        self.num_done = 0  # requests finished or aborted so far (progress bar)
        self.rejections: list[str] = []  # why the policy refused each request it refused on arrival
        self.record_itl = record_itl
        self.itl_rows: tuple[Column, Column, Column] = (Column("i"), Column("i"), Column("d"))
        # compact typed columns: a whole-trace run has hundreds of thousands of steps
        self.steps: dict[str, Column] = {k: Column(STEP_TYPES.get(k, "i")) for k in STEP_FIELDS}
        s = self.steps  # the columns filled at schedule time (hot path)
        self._at_schedule: tuple[Column, ...] = tuple(
            s[k]
            for k in (
                "schedule_time",
                "start",
                "end",
                "gpu_time",
                "num_running",
                "num_waiting",
                "kv_usage",
                "num_preempted",
                "num_paused",
            )
        )
        self._zero_at_schedule: tuple[Column, ...] = tuple(s[k] for k in ZERO_AT_SCHEDULE)
        self.rows = StepRows()  # the columns hold the ordinary steps' rows; jumps are recorded
        # two streams, each in time order as appended (merged into one table at the end):
        # CPU phases: kind code (TIMELINE_KINDS), start, end, step (21 bytes a row); GPU forwards
        self.cpu_timeline: tuple[Column, Column, Column, Column] = (
            Column("b"),
            Column("d"),
            Column("d"),
            Column("i"),
        )
        self.gpu_timeline: tuple[Column, Column, Column] = (Column("d"), Column("d"), Column("i"))
        # fast-forward jumps: neither their steps rows (`rows`) nor their intervals are appended:
        # both are expanded from these records when the tables are built (metrics_jumps)
        self.jumps = JumpChunks()
        self.timeline_released = False
        cfg = policy.config
        self.hol = HeadOfLineTracker(
            self.columns,
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
            getattr(cfg, "enable_chunked_prefill", True),
            cfg.block_size,
            cfg.num_gpu_blocks - 1,
            getattr(cfg, "scheduling_policy", "fcfs") == "priority",
        )
        for i, r in enumerate(requests or ()):
            self.admit(i, r)

    def admit(self, i: int, request: Request) -> None:
        """Workload row i's Request now exists (built on arrival); followed until it finishes."""
        self.stats[request.request_id] = LiveStats(i)
        self.live[i] = request

    # ---- world hooks ----
    def add_interval(self, resource: str, kind: str, start: float, end: float, step: int) -> None:
        """One busy interval of the CPU or the GPU (the GPU's are forwards)."""
        t: tuple[Column, ...]
        if RESOURCE_CODES[resource]:
            t = self.gpu_timeline
        else:
            t = self.cpu_timeline
            t[0].append(KIND_CODES[kind])
        t[-3].append(start)
        t[-2].append(end)
        t[-1].append(step)

    def release_timeline(self) -> None:
        """Drop the timeline buffers (timeline_table holds views of them while it merges) and the
        jumps' records (steps_table, which needs them, comes first)."""
        self.cpu_timeline = (Column("b"), Column("d"), Column("d"), Column("i"))
        self.gpu_timeline = (Column("d"), Column("d"), Column("i"))
        self.jumps = JumpChunks()
        self.timeline_released = True

    def on_step_done(self, h: Any) -> None:
        """A launched step finished on the GPU: its composition and times (h is a SimStep)."""
        s, i = self.steps, self.rows.row(h.step)
        if i < 0:  # a jump's step (its row is built with the tables)
            self.rows.write_done(h)
            return
        s["start"][i], s["end"][i], s["gpu_time"][i] = h.start, h.end, h.gpu_time
        s["num_prefill_reqs"][i], s["num_decode_reqs"][i] = h.num_prefill_reqs, h.num_decode_reqs
        s["num_prefill_tokens"][i], s["num_decode_tokens"][i] = h.num_prefill_tokens, h.num_decode_tokens
        s["num_spec_tokens"][i], s["deferred_sampling"][i] = h.num_spec_tokens, h.defer_sampling

    # ---- engine observer ----
    def on_add(self, request: Request) -> None:
        self.hol.added(self.stats[request.request_id].row)

    def on_schedule(self, step: int, plan: StepPlan) -> None:
        now = self.clock()
        running, waiting = self.policy.get_request_counts()
        kv = self.policy.kv_usage()
        assert len(self.steps["schedule_time"]) + self.rows.jumped == step, (
            "steps must be reported in launch order"
        )
        sched, start, end, gpu, n_run, n_wait, kv_use, n_pre, n_pause = self._at_schedule
        sched.append(now)
        start.append(NAN)
        end.append(NAN)
        gpu.append(0.0)
        n_run.append(running)
        n_wait.append(waiting)
        kv_use.append(kv)
        n_pre.append(len(plan.preempted_req_ids))
        n_pause.append(len(plan.paused_req_ids))
        for zero in self._zero_at_schedule:
            zero.append(0)
        if plan.new_req_ids:
            self._first_schedules(plan, now)
        self.hol.step(now, plan, running, kv)

    def on_update(self, step: int, plan: StepPlan, result: StepResult, outputs: list[RequestOutput]) -> None:
        now = self.clock()
        stats, finished = self.stats, 0
        gaps = self.itl_gaps
        record_itl = self.record_itl
        for out in outputs:
            st = stats[out.request_id]
            n = len(out.new_token_ids)
            if n:
                seen = st.num_out
                if seen == 0:
                    st.first_token = now
                else:
                    gap = now - st.last_token
                    gaps.append(gap)
                    st.itl_sum += gap
                    st.itl_n += 1
                if record_itl:
                    self._itl_rows(st.row, seen, n, now)
                st.last_token = now
                st.num_out = seen + n
            if out.finish_reason is not None:
                finished += 1
                self._finish(st.row, out.request_id, finish_name(out.finish_reason), now)
        if finished:
            self._add_finished(step, finished)

    def on_jump_finishes(self, step: int, outputs: list[RequestOutput], now: float) -> None:
        """Finishes in a fast-forward jump's last update (their tokens are already committed)."""
        for out in outputs:
            self._finish(self.stats[out.request_id].row, out.request_id, finish_name(out.finish_reason), now)
        self._add_finished(step, len(outputs))

    def _add_finished(self, step: int, n: int) -> None:
        """Requests that finished in the step's update."""
        i = self.rows.row(step)
        if i < 0:
            self.rows.add_finished(step, n)
        else:
            self.steps["num_finished"][i] += n

    def on_abort(self, requests: list[Request]) -> None:
        now = self.clock()
        for req in requests:
            st = self.stats.get(req.request_id)
            if st is not None:  # else: finished (and dropped) before
                self._finish(st.row, req.request_id, "abort", now)

    def on_reject(self, request: Request, reason: str) -> None:
        self.req.finish_reason[self.stats[request.request_id].row] = "rejected"
        self.rejections.append(reason)
        self.num_done += 1

    # ---- helpers ----
    def _finish(self, i: int, rid: str, reason: str, now: float) -> None:
        """Record a request's finish once."""
        b = self.req
        if b.finish_reason[i] is None:
            b.finish_reason[i] = reason
            b.finish_time[i] = now
            self.num_done += 1
        self.hol.left(i)
        self.hol.preempted.pop(rid, None)
        req = self.live.get(i)
        if req is not None and req.is_finished:  # hash, keep the counters, drop the Request
            self._drop(i, req)

    def _drop(self, i: int, req: Request) -> None:
        """Copy what the requests table needs from a Request and stop following it."""
        b = self.req
        st = self.stats.pop(req.request_id)
        b.num_out[i], b.first_token[i], b.last_token[i] = st.num_out, st.first_token, st.last_token
        b.itl_sum[i], b.itl_n[i] = st.itl_sum, st.itl_n
        b.out_hash[i] = output_hash(req.output_token_ids)
        req.output_token_ids = []
        c = b.counters  # COUNTERS, read directly (a getattr by name is slow compiled)
        c["num_preemptions"][i] = req.num_preemptions
        c["num_pauses"][i] = req.num_pauses
        c["num_recomputed_tokens"][i] = req.num_recomputed_tokens
        c["num_truncated_tokens"][i] = req.num_truncated_tokens
        del self.live[i]

    def finalize(self) -> None:
        """At the end of the run: take the outputs and counters of requests still unfinished."""
        for i, req in list(self.live.items()):
            self._drop(i, req)

    def output_hashes(self) -> np.ndarray:
        """Every request's output hash (that of no tokens for one that never arrived); after
        `finalize` for requests still running."""
        h = np.frombuffer(self.req.out_hash, dtype=np.int64).copy()
        h[h < 0] = EMPTY_HASH
        return h

    def _itl_rows(self, i: int, first: int, n: int, now: float) -> None:
        """Rows of the long per-token table."""
        ids, pos, times = self.itl_rows
        for k in range(n):
            ids.append(i)
            pos.append(first + k)
            times.append(now)

    def _first_schedules(self, plan: StepPlan, now: float) -> None:
        """First-scheduled times and prefix-cache hits of newly admitted requests."""
        b, stats = self.req, self.stats
        for rid in plan.new_req_ids:
            i = stats[rid].row
            if b.first_sched[i] != b.first_sched[i]:  # NaN
                b.first_sched[i] = now
                b.cached[i] = plan.context_lens.get(rid, 0)
            self.hol.left(i)


def finish_name(status: RequestStatus | None) -> str:
    """The requests table's finish_reason of a terminal status."""
    return FINISH_NAMES.get(status, "error") if status is not None else "error"


def output_hash(tokens: list[int]) -> int:
    """Two polynomial hashes of a request's output token ids, mod two primes below 2^31, as one
    62-bit value: equal hashes mean equal outputs across runs. Every product fits in 63 bits, so
    compiled (native i64, a few instructions a token) and interpreted give the same value."""
    a: i64 = 1
    b: i64 = 7
    for t in tokens:
        x: i64 = t  # token ids are below 2^31
        a = (a * HASH_M1 + x) % HASH_P1
        b = (b * HASH_M2 + x) % HASH_P2
    return a * 2147483648 + b  # a << 31 | b (a shift of a native i64 is best avoided; see oracle)


EMPTY_HASH = output_hash([])
