"""Turn the recorder's columnar buffers into the RunResult tables (columns: `schedsim.run.result`)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np
import pandas as pd
from schedsim.metrics.column import Column
from schedsim.metrics.jumps import fill_jump_steps, merge_jump_timeline
from schedsim.metrics.recorder import (
    KIND_CODES,
    RESOURCES,
    STEP_FIELDS,
    TIMELINE_KINDS,
    MetricsRecorder,
)  # noqa: F401 (output_hash re-exported)
from schedsim.metrics.rows import DTYPES


def requests_table(
    m: MetricsRecorder, targets: Sequence[int] | np.ndarray, rejected: set[str]
) -> pd.DataFrame:
    """One row per workload request."""
    m.finalize()  # outputs and counters of requests still unfinished
    hashes = m.output_hashes()
    b, w = m.req, m.columns
    arrival = np.asarray(w.arrival, dtype=float)
    first_token, finish = _view(b.first_token), _view(b.finish_time)
    num_out = _view(b.num_out)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(num_out >= 2, (_view(b.last_token) - first_token) / (num_out - 1), np.nan)
        itl_n = _view(b.itl_n).astype(float)
        mean_itl = np.where(itl_n > 0, _view(b.itl_sum) / itl_n, np.nan)
    reasons = b.finish_reason
    if rejected:
        reasons = [
            ("rejected" if rid in rejected else reason) for rid, reason in zip(w.ids, reasons, strict=True)
        ]
    first_sched = _view(b.first_sched)
    counters = {name: _view(col) for name, col in b.counters.items()}
    return pd.DataFrame(
        {
            "request_id": pd.array(w.ids, dtype="string"),
            "arrival_time": arrival,
            "prompt_tokens": np.asarray(w.prompt, dtype=np.int64),
            "target_output_tokens": np.asarray(targets, dtype=np.int64),
            "max_tokens": np.asarray(w.max_tokens, dtype=np.int64),
            "first_scheduled_time": first_sched,
            "queueing_time": first_sched - arrival,
            "first_token_time": first_token,
            "finish_time": finish,
            "ttft": first_token - arrival,
            "tpot": tpot,
            "mean_itl": mean_itl,
            "e2e": finish - arrival,
            "num_output_tokens": num_out,
            "num_cached_tokens": _view(b.cached),
            "finish_reason": pd.array(reasons, dtype="string"),
            **counters,
            "hol_blocking_time": m.hol.per_request(),
            "output_hash": hashes,
        },
        copy=False,
    )


def steps_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per launched step; the columns are the recorder's buffers, not copies."""
    if m.timeline_released:
        raise RuntimeError("steps_table after timeline_table: the jumps' steps rows were released")
    s = m.steps
    views = m.rows.place({name: s[name] for name in STEP_FIELDS})  # jumps' rows: zeros
    fill_jump_steps(m.jumps, views)
    cols: dict[str, np.ndarray] = {"step": np.arange(len(views["schedule_time"]), dtype=np.int32)}
    for name in STEP_FIELDS:
        col = views[name]
        cols[name] = col.view(bool) if name == "deferred_sampling" else col
        if name == "end":
            cols["duration"] = cols["end"] - cols["start"]
    return pd.DataFrame(cols, copy=False)


def _view(col: array | Column) -> np.ndarray:
    """A recorder column as numpy, sharing its memory (the recorder is done with it)."""
    a = col.array() if isinstance(col, Column) else col
    dtype = DTYPES[a.typecode]
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _in_start_order(start: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
    """A stream's columns by start time, ties in append order (streams are appended in order)."""
    if len(start) < 2 or bool(np.all(start[1:] >= start[:-1])):
        return [start, *cols]
    order = np.argsort(start, kind="stable")
    return [start[order], *(c[order] for c in cols)]


def timeline_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per CPU or GPU busy interval, by start time (CPU first at a tie), then append order.

    The two streams are each in time order already, so they are merged, not sorted, column by
    column, and the recorder's buffers are released as each is merged (a 1M-request run has ~20M
    intervals): this consumes the recorder's timeline and its jumps (build steps_table first).
    """
    cpu: list = [_view(a) for a in m.cpu_timeline]  # kind, start, end, step
    gpu: list = [_view(a) for a in m.gpu_timeline]  # start, end, step
    jumps = m.jumps
    m.release_timeline()  # the views keep the buffers alive only until merged
    if len(jumps):  # the fast-forward jumps' intervals, where they were appended
        k = KIND_CODES
        cpu, gpu = merge_jump_timeline(
            jumps, cpu, gpu, (k["schedule"], k["prepare_inputs"], k["d2h_copy"], k["update_from_output"])
        )
    del jumps  # the records, before the final merge copies the streams again
    cpu[1], cpu[0], cpu[2], cpu[3] = _in_start_order(cpu[1], [cpu[0], cpu[2], cpu[3]])
    gpu = _in_start_order(gpu[0], gpu[1:])
    n = len(cpu[1]) + len(gpu[0])
    g_pos = np.arange(len(gpu[0])) + np.searchsorted(cpu[1], gpu[0], side="right")
    is_cpu = np.ones(n, dtype=bool)
    is_cpu[g_pos] = False
    gpu.insert(0, np.full(len(gpu[0]), KIND_CODES["forward"], dtype=np.int8))
    cols = []
    for j in range(4):  # kind, start, end, step
        out = np.empty(n, dtype=cpu[j].dtype)
        out[is_cpu] = cpu[j]
        out[g_pos] = gpu[j]
        cpu[j] = gpu[j] = None  # type: ignore[call-overload]
        cols.append(out)
    kinds, start, end, step = cols
    return pd.DataFrame(
        {
            "resource": pd.Categorical.from_codes((~is_cpu).view(np.int8), categories=list(RESOURCES)),
            "kind": pd.Categorical.from_codes(kinds, categories=list(TIMELINE_KINDS)),
            "start": start,
            "end": end,
            "step": step,
        },
        copy=False,
    )


def itl_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per delivered token (only when recorded); a first token's itl is its TTFT."""
    ids, pos, times = (_view(col).copy() for col in m.itl_rows)
    order = np.lexsort((pos, ids))
    ids, pos, times = ids[order], pos[order], times[order]
    arrival = np.asarray(m.columns.arrival, dtype=float)
    prev = np.empty_like(times)
    if len(times):
        prev[0] = arrival[ids[0]]
        prev[1:] = np.where(ids[1:] == ids[:-1], times[:-1], arrival[ids[1:]])
    rid = np.array(m.columns.ids, dtype=object)
    return pd.DataFrame(
        {
            "request_id": pd.array(rid[ids], dtype="string"),
            "token_index": pos.astype(np.int64),
            "time": times,
            "itl": times - prev,
        }
    )
