"""What a fast-forward jump writes into the metrics recorder: the rows k ordinary iterations write."""

from __future__ import annotations

import struct
from array import array
from functools import reduce
from operator import add
from typing import Any

from .metrics import KIND_CODES, MetricsRecorder

ZERO_COLUMNS = ("num_prefill_reqs", "num_prefill_tokens", "num_spec_tokens", "num_waiting",
                "num_preempted", "num_paused", "num_finished", "deferred_sampling")


def commit_metrics(m: MetricsRecorder, reqs: list, idx0: int, k: int, times: dict[str, Any],
                   usage: list[float], is_async: bool) -> None:
    """Steps rows, timeline intervals and per-request token times of k steady iterations."""
    s, n = m.steps, len(reqs)
    assert len(s["schedule_time"]) == idx0, "steps must be reported in launch order"
    for name, values in (("schedule_time", times["sched"]), ("start", times["start"]),
                         ("end", times["end"]), ("gpu_time", times["gpu"]), ("kv_usage", usage)):
        put(s[name], values)
    for name in ZERO_COLUMNS:
        s[name].frombytes(bytes(k * s[name].itemsize))
    put(s["num_running"], [n] * k)
    n_last = times["last"][0] if "last" in times else n  # the last schedule may leave some out
    for name in ("num_decode_reqs", "num_decode_tokens"):
        put(s[name], [n] * (k - 1))
        s[name].append(n_last)
    _timeline_rows(m, idx0, k, times, is_async)
    _token_times(m, reqs, k, times["update"])
    m.hol._since = times["sched"][-1]  # nobody waits: the tracker only remembers the last schedule


def _timeline_rows(m: MetricsRecorder, idx0: int, k: int, times: dict[str, Any], is_async: bool) -> None:
    """CPU phases and GPU forwards in the order the world appends them (phases with cost > 0)."""
    s, p, d0, u0, d, u = times["costs"]
    s_last, p_last = times["last"][1:] if "last" in times else (s, p)
    lag = 1 if is_async else 0
    step = list(range(idx0, idx0 + k))
    prev = [x - lag for x in step]
    k_ = KIND_CODES
    phases = [(k_["schedule"], times["poll"], times["sched"], step),
              (k_["prepare_inputs"], times["sched"], times["ready"], step),
              (k_["d2h_copy"], times["wait"], times["d2h"], prev),
              (k_["update_from_output"], times["d2h"], times["update"], prev)]
    forward = (times["start"], times["end"], step)
    gpu = times["gpu"]
    first = (s_last, p_last) if k == 1 else (s, p)
    _rows_at(m, phases, forward, 0, [first[0] > 0, first[1] > 0, d0 > 0, u0 > 0], gpu[0] > 0)
    if k == 1:
        return
    _middle_rows(m, phases, forward, k - 1, (s, p, d, u), gpu)
    _rows_at(m, phases, forward, k - 1, [s_last > 0, p_last > 0, d > 0, u > 0], gpu[k - 1] > 0)


def _middle_rows(m: MetricsRecorder, phases: list, forward: tuple, hi: int, costs: tuple, gpu: list) -> None:
    """The rows of iterations 1 .. hi - 1, which share their phase costs, column by column."""
    if hi <= 1:
        return
    mask = [c > 0 for c in costs]
    if not all(g > 0 for g in gpu[1:hi]):  # a zero-time forward is not recorded: row by row
        for i in range(1, hi):
            _rows_at(m, phases, forward, i, mask, gpu[i] > 0)
        return
    for buf, col in zip(m.gpu_timeline, forward, strict=True):
        put(buf, col[1:hi])
    cols = [ph for ph, keep in zip(phases, mask, strict=True) if keep]
    w, rows = len(cols), hi - 1
    kind, *bufs = m.cpu_timeline
    put(kind, [c[0] for c in cols] * rows)
    for buf, pos in zip(bufs, (1, 2, 3), strict=True):
        inter: list[Any] = [None] * (w * rows)
        for j, c in enumerate(cols):
            inter[j::w] = c[pos][1:hi]  # iteration-major, phase order within an iteration
        put(buf, inter)


def _rows_at(m: MetricsRecorder, phases: list, forward: tuple, i: int, mask: list[bool],
             with_forward: bool) -> None:
    """The timeline rows of iteration i alone."""
    kind, starts, ends, steps = m.cpu_timeline
    for ph, keep in zip(phases, mask, strict=True):
        if keep:
            kind.append(ph[0])
            starts.append(ph[1][i])
            ends.append(ph[2][i])
            steps.append(ph[3][i])
    if with_forward:
        for buf, col in zip(m.gpu_timeline, forward, strict=True):
            buf.append(col[i])


def _token_times(m: MetricsRecorder, reqs: list, k: int, update: list[float]) -> None:
    """First-token times, inter-token gaps (update-major, running order) and their running sums."""
    b, gaps, n = m.req, m.itl_gaps, len(reqs)
    num_out, last_token, itl_sum, itl_n = b.num_out, b.last_token, b.itl_sum, b.itl_n
    idx = [m.index[r.request_id] for r in reqs]
    u0, u_last = update[0], update[-1]
    diffs = [update[i] - update[i - 1] for i in range(1, k)]  # every request's gap from then on
    seen = []
    for w in idx:  # first update of the stretch, in running order; then each request's sum
        c = num_out[w]
        seen.append(c)
        if c:
            g = u0 - last_token[w]
            gaps.append(g)
            total = itl_sum[w] + g
        else:
            b.first_token[w] = u0
            total = itl_sum[w]
        itl_sum[w] = reduce(add, diffs, total)  # the same additions, in the same order
        itl_n[w] += k - 1 + (c > 0)
        last_token[w] = u_last
        num_out[w] = c + k
    for g in diffs:
        gaps.append_run(g, n)
    if m.record_itl:
        ids, pos, tms = m.itl_rows
        for i in range(k):
            put(ids, idx)
            put(pos, [c + i for c in seen])
            put(tms, [update[i]] * n)


def put(buf: array, values: list) -> None:
    """buf.extend(values), converted in one struct.pack (array.extend converts item by item)."""
    buf.frombytes(struct.pack(f"{len(values)}{buf.typecode}", *values))
