"""Splice two runs' tables at a shared idle point (schedsim.run.segments): the serial run's rows.

At the split both runs idle: every interval of the run before it ends by the split's arrival and
every one after starts there or later, every request lives on one side, and step ids run on. So
the serial tables are the first run's rows before the split followed by the second run's rows
after it, step ids shifted; the ITL samples are spliced as the run-length encoding would have
merged them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Tables:
    """The tables one run builds, and its ITL samples (values, counts)."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    timeline: pd.DataFrame
    itl: pd.DataFrame | None
    itl_gaps: tuple[np.ndarray, np.ndarray]


def _after(plan: Any, split: Any) -> np.ndarray:
    """Workload rows that arrive at the split or later."""
    return plan.row_pos >= split.pos


def _itl_rows(itl: pd.DataFrame | None, requests: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame | None:
    """The per-token rows of the given requests."""
    if itl is None:
        return None
    keep = itl["request_id"].isin(requests["request_id"][rows])
    return itl[keep.to_numpy()].reset_index(drop=True)


def head(t: Tables, split: Any, plan: Any) -> Tables:
    """The first run's rows before the split (it may have run past it)."""
    before = ~_after(plan, split)
    n = split.launched
    timeline = t.timeline
    keep = timeline["step"].to_numpy() < n
    if not keep.all():  # ran on past the split: drop what came after
        timeline = timeline[keep].reset_index(drop=True)
    return Tables(t.requests, t.steps.iloc[:n], timeline, _itl_rows(t.itl, t.requests, before),
                  runs_before(t.itl_gaps, split.itl_mark))


def tail(t: Tables, split: Any, plan: Any) -> Tables:
    """The second run's rows from the split on (its requests: only those arriving from there)."""
    after = _after(plan, split)
    n = split.launched
    timeline = t.timeline
    if n:
        timeline = timeline[timeline["step"].to_numpy() >= n].reset_index(drop=True)
    return Tables(t.requests[after].reset_index(drop=True), t.steps.iloc[n:], timeline,
                  _itl_rows(t.itl, t.requests, after), runs_after(t.itl_gaps, split.itl_mark))


Runs = tuple[np.ndarray, np.ndarray]


def runs_before(runs: Runs, mark: tuple[int, float, int]) -> Runs:
    """The samples appended before RunLengths.mark() returned `mark` (later ones dropped)."""
    closed, last, count = mark
    values, counts = runs
    if count:  # the run open at the mark, as it was then
        return np.append(values[:closed], last), np.append(counts[:closed], count)
    return values[:closed], counts[:closed]


def runs_after(runs: Runs, mark: tuple[int, float, int]) -> Runs:
    """The samples appended after RunLengths.mark() returned `mark`."""
    closed, _, count = mark
    values, counts = runs[0][closed:], runs[1][closed:].copy()
    if count:  # the run open at the mark may have gone on after it
        counts[0] -= count
        if counts[0] == 0:
            values, counts = values[1:], counts[1:]
    return values, counts


def join(h: Tables, t: Tables, split: Any, theirs: Any, plan: Any) -> Tables:
    """head + tail: one run's tables, as if it had not been split."""
    shift = split.launched - theirs.launched
    steps = pd.concat([h.steps, t.steps], ignore_index=True)
    steps["step"] = np.arange(len(steps), dtype=h.steps["step"].dtype)
    timeline = t.timeline
    if shift:
        timeline = timeline.assign(step=(timeline["step"].to_numpy() + shift).astype(
            h.timeline["step"].dtype))
    timeline = pd.concat([h.timeline, timeline], ignore_index=True)
    return Tables(_patch_rows(h.requests, t.requests, _after(plan, split)), steps, timeline,
                  _join_itl(h, t), join_runs(h.itl_gaps, t.itl_gaps))


def _patch_rows(requests: pd.DataFrame, after: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The first run's request rows with those arriving from the split (`mask`) replaced."""
    cols: dict[str, Any] = {}
    for name in requests.columns:
        col = requests[name]
        if isinstance(col.dtype, np.dtype):
            arr: Any = col.to_numpy(copy=True)
            arr[mask] = after[name].to_numpy()
        else:
            arr = col.array.copy()
            arr[mask] = after[name].array
        cols[name] = arr
    return pd.DataFrame(cols, copy=False)


def _join_itl(h: Tables, t: Tables) -> pd.DataFrame | None:
    """Per-token rows of both sides in the serial order (workload row, then token index)."""
    if h.itl is None or t.itl is None:
        return None
    both = pd.concat([h.itl, t.itl], ignore_index=True)
    row = pd.Index(h.requests["request_id"]).get_indexer(both["request_id"])
    order = np.lexsort((both["token_index"].to_numpy(), row))
    return both.iloc[order].reset_index(drop=True)


def join_runs(a: Runs, b: Runs) -> Runs:
    """Two run-length encodings of consecutive samples as one (equal runs at the seam merge)."""
    (va, ca), (vb, cb) = a, b
    if len(va) and len(vb) and va[-1] == vb[0]:
        ca = ca.copy()
        ca[-1] += cb[0]
        vb, cb = vb[1:], cb[1:]
    return np.concatenate([va, vb]), np.concatenate([ca, cb]).astype(np.int64)

