"""What a fast-forward jump writes into the metrics recorder: the rows k ordinary iterations write."""

from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import KIND_CODES, RESOURCE_CODES, MetricsRecorder

ZERO_COLUMNS = ("num_prefill_reqs", "num_prefill_tokens", "num_spec_tokens", "num_waiting",
                "num_preempted", "num_paused", "num_finished", "deferred_sampling")


def commit_metrics(m: MetricsRecorder, reqs: list, idx0: int, k: int, times: dict[str, Any],
                   usage: list[float], is_async: bool) -> None:
    """Steps rows, timeline intervals and per-request token times of k steady iterations."""
    s, n = m.steps, len(reqs)
    assert len(s["schedule_time"]) == idx0, "steps must be reported in launch order"
    for name, values in (("schedule_time", times["sched"]), ("start", times["start"]),
                         ("end", times["end"]), ("gpu_time", times["gpu"]), ("kv_usage", usage)):
        s[name].extend(values)
    for name in ZERO_COLUMNS:
        s[name].extend([0] * k)
    for name in ("num_decode_reqs", "num_decode_tokens", "num_running"):
        s[name].extend([n] * k)
    _timeline_rows(m, idx0, k, times, is_async)
    _token_times(m, reqs, k, times["update"])
    m.hol._since = times["sched"][-1]  # nobody waits: the tracker only remembers the last schedule


def _timeline_rows(m: MetricsRecorder, idx0: int, k: int, times: dict[str, Any], is_async: bool) -> None:
    """CPU phases and GPU forwards in the order the world appends them (phases with cost > 0)."""
    res, kind, starts, ends, steps = m.timeline
    s, p, d0, u0, d, u = times["costs"]
    lag = 1 if is_async else 0
    step = list(range(idx0, idx0 + k))
    prev = [x - lag for x in step]
    cpu, gpu_code, k_ = RESOURCE_CODES["cpu"], RESOURCE_CODES["gpu"], KIND_CODES
    phases = [(cpu, k_["schedule"], times["poll"], times["sched"], step),
              (cpu, k_["prepare_inputs"], times["sched"], times["ready"], step),
              (gpu_code, k_["forward"], times["start"], times["end"], step),
              (cpu, k_["d2h_copy"], times["wait"], times["d2h"], prev),
              (cpu, k_["update_from_output"], times["d2h"], times["update"], prev)]
    gpu = times["gpu"]
    _rows_at(m, phases, 0, [s > 0, p > 0, gpu[0] > 0, d0 > 0, u0 > 0])
    if k == 1:
        return
    if not all(g > 0 for g in gpu):  # a zero-time forward is not recorded: row by row
        for i in range(1, k):
            _rows_at(m, phases, i, [s > 0, p > 0, gpu[i] > 0, d > 0, u > 0])
        return
    cols = [ph for ph, cost in zip(phases, (s, p, 1.0, d, u), strict=True) if cost > 0]
    w, rows = len(cols), k - 1
    res.extend([c[0] for c in cols] * rows)
    kind.extend([c[1] for c in cols] * rows)
    for buf, pos in ((starts, 2), (ends, 3), (steps, 4)):
        inter: list[Any] = [None] * (w * rows)
        for j, c in enumerate(cols):
            inter[j::w] = c[pos][1:]  # iteration-major, phase order within an iteration
        buf.extend(inter)


def _rows_at(m: MetricsRecorder, phases: list, i: int, mask: list[bool]) -> None:
    """The timeline rows of iteration i alone."""
    res, kind, starts, ends, steps = m.timeline
    for ph, keep in zip(phases, mask, strict=True):
        if keep:
            res.append(ph[0])
            kind.append(ph[1])
            starts.append(ph[2][i])
            ends.append(ph[3][i])
            steps.append(ph[4][i])


def _token_times(m: MetricsRecorder, reqs: list, k: int, update: list[float]) -> None:
    """First-token times, inter-token gaps (update-major, running order) and their running sums."""
    b, n = m.req, len(reqs)
    idx = [m.index[r.request_id] for r in reqs]
    seen = [b.num_out[w] for w in idx]
    u = np.array(update)
    diffs = np.diff(u)
    first_gap = np.array([update[0] - b.last_token[w] if c else 0.0 for w, c in zip(idx, seen, strict=True)])
    has_first = np.array([c > 0 for c in seen])
    gaps = np.empty((k, n))
    gaps[0] = first_gap
    gaps[1:] = diffs[:, None]
    flat = gaps.ravel() if has_first.all() else gaps.ravel()[np.concatenate(
        [has_first, np.ones((k - 1) * n, dtype=bool)])]
    m.itl_gaps.extend(flat)
    acc = np.empty((k + 1, n))
    acc[0] = [b.itl_sum[w] for w in idx]
    acc[1:] = gaps
    sums = np.add.accumulate(acc, axis=0)[-1].tolist()
    for w, c, total in zip(idx, seen, sums, strict=True):
        if c == 0:
            b.first_token[w] = update[0]
        b.itl_sum[w] = total
        b.itl_n[w] += k if c else k - 1
        b.last_token[w] = update[-1]
        b.num_out[w] = c + k
    if m.record_itl:
        ids, pos, tms = m.itl_rows
        for i in range(k):
            ids.extend(idx)
            pos.extend([c + i for c in seen])
            tms.extend([update[i]] * n)
