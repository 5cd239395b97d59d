"""What a fast-forward jump writes into the metrics recorder: the rows k ordinary iterations write."""

from __future__ import annotations

from typing import Any, Final

from .fastforward_timeline import StretchTimes
from .metrics import KIND_CODES, MetricsRecorder
from .policies import Request

SCHEDULE: Final = KIND_CODES["schedule"]
PREPARE: Final = KIND_CODES["prepare_inputs"]
D2H: Final = KIND_CODES["d2h_copy"]
UPDATE: Final = KIND_CODES["update_from_output"]


def commit_metrics(m: MetricsRecorder, reqs: list[Request], idx0: int, k: int, t: StretchTimes,
                   usage: list[float], is_async: bool) -> None:
    """Steps rows, timeline intervals and per-request token times of k steady iterations."""
    n = len(reqs)
    (sched, start, end, gpu, kv_usage, running, decode_reqs, decode_tokens,
     *zero_cols) = m.jump_step_columns
    assert len(sched) == idx0, "steps must be reported in launch order"
    sched.extend(t.sched)
    start.extend(t.start)
    end.extend(t.end)
    gpu.extend(t.gpu)
    kv_usage.extend(usage)
    zeros: list[Any] = [0] * k
    for col in zero_cols:
        col.extend(zeros)
    running.extend([n] * k)
    n_last = t.last_n if t.last_n >= 0 else n  # the last schedule may leave some out
    batch: list[Any] = [n] * k
    batch[-1] = n_last
    decode_reqs.extend(batch)
    decode_tokens.extend(batch)
    _timeline_rows(m, idx0, k, t, is_async)
    _token_times(m, reqs, k, t.update)
    m.hol._since = t.sched[-1]  # nobody waits: the tracker only remembers the last schedule


def _timeline_rows(m: MetricsRecorder, idx0: int, k: int, t: StretchTimes, is_async: bool) -> None:
    """CPU phases and GPU forwards in the order the world appends them (phases with cost > 0):
    iteration by iteration, schedule, prepare_inputs, d2h_copy, update_from_output (the last two
    for the step before under a batch queue); the first iteration's d2h and update belong to the
    batch before the stretch, the last one's schedule side to a batch retime_last shrank.

    The lists hold objects (`Any`): compiled, a float read from a list[float] is unboxed and
    boxed again when appended; an object is just referenced again."""
    lag = 1 if is_async else 0
    kinds: list[Any] = []
    starts: list[Any] = []
    ends: list[Any] = []
    steps: list[Any] = []
    g_starts: list[Any] = []
    g_ends: list[Any] = []
    g_steps: list[Any] = []
    poll: list[Any] = t.poll
    sched: list[Any] = t.sched
    ready: list[Any] = t.ready
    wait: list[Any] = t.wait
    d2h: list[Any] = t.d2h
    update: list[Any] = t.update
    start: list[Any] = t.start
    end: list[Any] = t.end
    gpu = t.gpu
    last = k - 1
    for i in range(k):
        step: Any = idx0 + i  # boxed once, referenced by every row of the iteration
        before: Any = idx0 + i - lag
        if (t.s_last if i == last else t.s) > 0:
            kinds.append(SCHEDULE)
            starts.append(poll[i])
            ends.append(sched[i])
            steps.append(step)
        if (t.p_last if i == last else t.p) > 0:
            kinds.append(PREPARE)
            starts.append(sched[i])
            ends.append(ready[i])
            steps.append(step)
        if (t.d0 if i == 0 else t.d) > 0:
            kinds.append(D2H)
            starts.append(wait[i])
            ends.append(d2h[i])
            steps.append(before)
        if (t.u0 if i == 0 else t.u) > 0:
            kinds.append(UPDATE)
            starts.append(d2h[i])
            ends.append(update[i])
            steps.append(before)
        if gpu[i] > 0:
            g_starts.append(start[i])
            g_ends.append(end[i])
            g_steps.append(step)
    ck, cs, ce, cst = m.cpu_timeline
    ck.extend(kinds)
    cs.extend(starts)
    ce.extend(ends)
    cst.extend(steps)
    gs, ge, gst = m.gpu_timeline
    gs.extend(g_starts)
    ge.extend(g_ends)
    gst.extend(g_steps)


def _token_times(m: MetricsRecorder, reqs: list[Request], k: int, update: list[float]) -> None:
    """First-token times, inter-token gaps (update-major, running order) and their running sums."""
    gaps, n, stats = m.itl_gaps, len(reqs), m.stats
    u0, u_last = update[0], update[-1]
    diffs = [update[i] - update[i - 1] for i in range(1, k)]  # every request's gap from then on
    record_itl = m.record_itl
    seen: list[int] = []
    rows: list[int] = []
    for r in reqs:  # first update of the stretch, in running order; then each request's sum
        st = stats[r.request_id]
        c = st.num_out
        total = st.itl_sum
        if c:
            g = u0 - st.last_token
            gaps.append(g)
            total += g
            st.itl_n += k
        else:
            st.first_token = u0
            st.itl_n += k - 1
        for x in diffs:  # the same additions, in the same order, as k ordinary updates
            total += x
        st.itl_sum = total
        st.last_token = u_last
        st.num_out = c + k
        if record_itl:
            seen.append(c)
            rows.append(st.row)
    for x in diffs:
        gaps.append_run(x, n)
    if record_itl:
        ids, pos, tms = m.itl_rows
        for i in range(k):
            ids.extend(rows)
            pos.extend([c + i for c in seen])
            tms.extend([update[i]] * n)


