"""The run summary: vLLM benchmark figures plus busy-time overlap (keys: schedsim.run.result.SUMMARY_KEYS)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from schedsim.metrics.runlength import weighted_mean, weighted_percentiles


def _stats(prefix: str, values: np.ndarray, out: dict[str, Any]) -> None:
    """mean/median/p99 in ms (NaN when there is nothing to measure)."""
    v = values[~np.isnan(values)] * 1000.0
    if len(v):
        out[f"mean_{prefix}_ms"] = float(v.mean())
        out[f"median_{prefix}_ms"] = float(np.median(v))
        out[f"p99_{prefix}_ms"] = float(np.percentile(v, 99))
    else:
        out[f"mean_{prefix}_ms"] = out[f"median_{prefix}_ms"] = out[f"p99_{prefix}_ms"] = float("nan")


def _run_length_stats(prefix: str, values: np.ndarray, counts: np.ndarray, out: dict[str, Any]) -> None:
    """_stats of run-length encoded samples (values in s, no NaN), without expanding them."""
    if not len(values):
        out[f"mean_{prefix}_ms"] = out[f"median_{prefix}_ms"] = out[f"p99_{prefix}_ms"] = float("nan")
        return
    v = values * 1000.0
    out[f"mean_{prefix}_ms"] = weighted_mean(v, counts)
    out[f"median_{prefix}_ms"], out[f"p99_{prefix}_ms"] = weighted_percentiles(v, counts, [50, 99])


def merged_busy(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted disjoint (start, end) arrays."""
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


CHUNK = 1 << 20  # rows per slice: summaries of 20M-interval timelines stay within ~100 MB


def overlap(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Total length of the intersection of two unions of intervals."""
    a_start, a_end = _disjoint(a_start, a_end)
    b_start, b_end = merged_busy(b_start, b_end)
    if len(a_start) == 0 or len(b_start) == 0:
        return 0.0
    cover = _Coverage(b_start, b_end)
    return float(
        sum(
            np.sum(cover(a_end[i : i + CHUNK]) - cover(a_start[i : i + CHUNK]))
            for i in range(0, len(a_start), CHUNK)
        )
    )


def _disjoint(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals as they are when already sorted and disjoint (one thread's), else merged."""
    if len(start) < 2 or (bool(np.all(start[1:] >= start[:-1])) and bool(np.all(start[1:] >= end[:-1]))):
        return start, end
    return merged_busy(start, end)


class _Coverage:
    """Time covered by sorted disjoint intervals up to t: a piecewise-linear function of t."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        self.start, self.length = start, end - start
        self.cum = np.concatenate([[0.0], np.cumsum(self.length)])

    def __call__(self, t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.start, t, side="right")  # intervals starting at or before t
        j = np.maximum(i - 1, 0)
        last = np.minimum(np.clip(t - self.start[j], 0, None), self.length[j])
        return self.cum[j] + np.where(i > 0, last, 0.0)


def busy_figures(timeline: pd.DataFrame, out: dict[str, Any]) -> None:
    """GPU busy/idle and the share of CPU time hidden under GPU time."""
    res = timeline["resource"]
    is_gpu = (
        res.cat.codes.to_numpy() == list(res.cat.categories).index("gpu")
        if len(timeline)
        else np.zeros(0, dtype=bool)
    )
    start, end = timeline["start"].to_numpy(float), timeline["end"].to_numpy(float)
    gs, ge = start[is_gpu], end[is_gpu]
    out["gpu_busy_s"] = float(np.sum(ge - gs))
    span = float(ge.max() - gs.min()) if len(gs) else 0.0
    out["gpu_idle_fraction"] = 1.0 - out["gpu_busy_s"] / span if span > 0 else float("nan")
    cpu_busy, disjoint = _cpu_busy(start, end, is_gpu)
    if disjoint and _sweepable(start, gs, ge):
        hidden = hidden_by_runs(start, end)
    else:  # CPU or GPU intervals that overlap each other, or rows out of start order: merge
        hidden = overlap(start[~is_gpu], end[~is_gpu], gs, ge)
    out["cpu_busy_s"] = cpu_busy
    out["cpu_hidden_fraction"] = hidden / cpu_busy if cpu_busy > 0 else float("nan")


def _cpu_busy(start: np.ndarray, end: np.ndarray, is_gpu: np.ndarray) -> tuple[float, bool]:
    """CPU busy time, and whether the CPU intervals are one thread's (sorted, disjoint)."""
    busy, prev_end, disjoint = 0.0, -np.inf, True
    for i in range(0, len(start), CHUNK):
        cpu = ~is_gpu[i : i + CHUNK]
        s, e = start[i : i + CHUNK][cpu], end[i : i + CHUNK][cpu]
        if len(s) == 0:
            continue
        busy += float(np.sum(e - s))
        disjoint = disjoint and s[0] >= prev_end and bool(np.all(s[1:] >= e[:-1]))
        prev_end = e[-1]
    return busy, disjoint


def _sweepable(start: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> bool:
    """Rows in start order and GPU intervals disjoint (one stream): hidden_by_runs applies."""
    return bool(np.all(start[1:] >= start[:-1])) and bool(np.all(gs[1:] >= ge[:-1]))


def hidden_by_runs(start: np.ndarray, end: np.ndarray) -> float:
    """CPU time under GPU time, for rows in start order with disjoint CPU and disjoint GPU
    intervals: over each run of overlapping intervals, their lengths' sum less the run's length
    (|C & G| in the run). Touching intervals start a new run, so a run of one interval adds
    exactly 0 (a sync run's 0.0). One sweep, a slice at a time; the open run carries over."""
    total = 0.0
    open_sum = open_s = 0.0
    cur_e = -np.inf  # the open run's end (none before the first row)
    for i in range(0, len(start), CHUNK):
        s, e = start[i : i + CHUNK], end[i : i + CHUNK]
        length = e - s
        ends = np.maximum.accumulate(np.maximum(e, cur_e))  # the run's end after each row
        before = np.concatenate(([cur_e], ends[:-1]))
        idx = np.flatnonzero(s >= before)  # rows that start a run
        if len(idx) == 0:
            open_sum += float(np.sum(length))
            cur_e = float(ends[-1])
            continue
        if i > 0:  # the open run ends before the slice's first new run
            open_sum += float(np.sum(length[: idx[0]]))
            total += open_sum - (float(before[idx[0]]) - open_s)
        sums = np.add.reduceat(length, idx)
        total += float(np.sum(sums[:-1] - (before[idx[1:]] - s[idx[:-1]])))
        open_sum, open_s, cur_e = float(sums[-1]), float(s[idx[-1]]), float(ends[-1])
    if len(start):
        total += open_sum - (cur_e - open_s)
    return max(total, 0.0)


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput, in ms (None: not constrained)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    timeline: pd.DataFrame,
    itl_gaps: tuple[np.ndarray, np.ndarray],
    slo: Slo,
    sim_wall_s: float,
) -> dict[str, Any]:
    """The summary dict."""
    reason = requests["finish_reason"].fillna("")
    done = reason.isin(["stop", "length"]).to_numpy()
    t0 = float(requests["arrival_time"].min()) if len(requests) else 0.0
    t_end = np.nanmax(
        np.concatenate([requests["finish_time"].to_numpy(float), steps["end"].to_numpy(float), [t0]])
    )
    duration = max(float(t_end) - t0, 1e-12)
    out_tok = int(requests.loc[done, "num_output_tokens"].sum())
    in_tok = int(requests.loc[done, "prompt_tokens"].sum())
    out: dict[str, Any] = {
        "num_requests": len(requests),
        "num_finished": int(done.sum()),
        "num_aborted": int((reason == "abort").sum()),
        "num_rejected": int((reason == "rejected").sum()),
        "num_errored": int((reason == "error").sum()),
        "num_unfinished": int((reason == "").sum()),
        "duration_s": duration,
        "request_throughput": done.sum() / duration,
        "output_throughput": out_tok / duration,
        "total_token_throughput": (in_tok + out_tok) / duration,
    }
    fin = {col: requests[col].to_numpy(float)[done] for col in ("ttft", "tpot", "e2e")}  # no table copy
    for prefix, col in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2e")):
        _stats(prefix, fin[col], out)
    _run_length_stats("itl", *itl_gaps, out)
    out["mean_queueing_ms"] = float(np.nanmean(requests["queueing_time"])) * 1000 if len(requests) else 0.0
    out["mean_hol_blocking_ms"] = float(requests["hol_blocking_time"].mean()) * 1000 if len(requests) else 0.0
    out["p99_hol_blocking_ms"] = (
        float(np.percentile(requests["hol_blocking_time"], 99)) * 1000 if len(requests) else 0.0
    )
    _goodput(fin, slo, duration, out)
    busy_figures(timeline, out)
    _counters(requests, steps, duration, out)
    out["sim_wall_s"] = sim_wall_s
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}


def _goodput(fin: dict[str, np.ndarray], slo: Slo, duration: float, out: dict[str, Any]) -> None:
    """Finished requests per second meeting every configured SLO (vLLM's --goodput)."""
    ok = np.ones(len(fin["ttft"]), dtype=bool)
    for limit, col in ((slo.ttft_ms, "ttft"), (slo.tpot_ms, "tpot"), (slo.e2el_ms, "e2e")):
        if limit is not None:
            v = fin[col] * 1000.0
            ok &= np.isnan(v) | (v <= limit) if col == "tpot" else (v <= limit)
    out["request_goodput"] = float(ok.sum()) / duration
    out["slo"] = {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "e2el_ms": slo.e2el_ms}


def _counters(requests: pd.DataFrame, steps: pd.DataFrame, duration: float, out: dict[str, Any]) -> None:
    """Preemptions, pauses, recompute, KV usage and step counts."""
    out["num_preemptions"] = int(requests["num_preemptions"].sum())
    out["num_pauses"] = int(requests["num_pauses"].sum())
    # preemptions and pauses in the same three units, so that engines compare side by side:
    # per second of the run, per 1,000 busy steps, per request
    out["preemption_rate"] = out["num_preemptions"] / duration
    out["pause_rate"] = out["num_pauses"] / duration
    out["recomputed_tokens"] = int(requests["num_recomputed_tokens"].sum())
    out["truncated_tokens"] = int(requests["num_truncated_tokens"].sum())
    tokens = steps["num_prefill_tokens"].to_numpy(np.int64) + steps["num_decode_tokens"].to_numpy(np.int64)
    busy = tokens > 0  # a mask, not a copy of the steps table (millions of rows in long runs)
    n_busy = int(busy.sum())
    kv = steps["kv_usage"]
    out["mean_kv_usage"] = float(kv[busy].mean()) if n_busy else 0.0
    out["max_kv_usage"] = float(kv.max()) if len(steps) else 0.0
    out["num_steps"] = n_busy
    out["num_empty_steps"] = int(len(steps) - n_busy)
    computed = int(tokens.sum())
    out["recomputed_share"] = out["recomputed_tokens"] / computed if computed else 0.0
    for kind in ("preemptions", "pauses"):
        count = out[f"num_{kind}"]
        out[f"{kind}_per_1k_steps"] = 1000.0 * count / n_busy if n_busy else 0.0
        out[f"{kind}_per_request"] = count / len(requests) if len(requests) else 0.0
    admitted = requests["num_cached_tokens"].notna() & requests["first_scheduled_time"].notna()
    prompt = int(requests.loc[admitted, "prompt_tokens"].sum())
    out["prefix_cache_hit_rate"] = (
        int(requests.loc[admitted, "num_cached_tokens"].sum()) / prompt if prompt else 0.0
    )
