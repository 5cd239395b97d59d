"""The run summary: vLLM benchmark figures plus busy-time overlap (keys: results.SUMMARY_KEYS)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .config import RunConfig
from .runlength import weighted_mean, weighted_percentile


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
    out[f"median_{prefix}_ms"] = weighted_percentile(v, counts, 50)
    out[f"p99_{prefix}_ms"] = weighted_percentile(v, counts, 99)


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


def overlap(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Total length of the intersection of two unions of intervals."""
    a_start, a_end = merged_busy(a_start, a_end)
    b_start, b_end = merged_busy(b_start, b_end)
    if len(a_start) == 0 or len(b_start) == 0:
        return 0.0
    # time covered by b up to t, as a piecewise-linear function evaluated at a's endpoints
    cum = np.concatenate([[0.0], np.cumsum(b_end - b_start)])

    def covered(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(b_start, t, side="right")  # b intervals starting at or before t
        partial = np.clip(t - b_start[np.maximum(i - 1, 0)], 0, None)
        last = np.minimum(partial, (b_end - b_start)[np.maximum(i - 1, 0)])
        return cum[np.maximum(i - 1, 0)] + np.where(i > 0, last, 0.0)

    return float(np.sum(covered(a_end) - covered(a_start)))


def busy_figures(timeline: pd.DataFrame, out: dict[str, Any]) -> None:
    """GPU busy/idle and the share of CPU time hidden under GPU time."""
    cpu, gpu = timeline[timeline["resource"] == "cpu"], timeline[timeline["resource"] == "gpu"]
    cs, ce = cpu["start"].to_numpy(float), cpu["end"].to_numpy(float)
    gs, ge = gpu["start"].to_numpy(float), gpu["end"].to_numpy(float)
    out["gpu_busy_s"] = float(np.sum(ge - gs))
    out["cpu_busy_s"] = float(np.sum(ce - cs))
    span = float(ge.max() - gs.min()) if len(gs) else 0.0
    out["gpu_idle_fraction"] = 1.0 - out["gpu_busy_s"] / span if span > 0 else float("nan")
    out["cpu_hidden_fraction"] = (overlap(cs, ce, gs, ge) / out["cpu_busy_s"]
                                  if out["cpu_busy_s"] > 0 else float("nan"))


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, timeline: pd.DataFrame,
              itl_gaps: tuple[np.ndarray, np.ndarray], cfg: RunConfig, sim_wall_s: float
              ) -> dict[str, Any]:
    """The summary dict."""
    reason = requests["finish_reason"].fillna("")
    done = reason.isin(["stop", "length"]).to_numpy()
    t0 = float(requests["arrival_time"].min()) if len(requests) else 0.0
    t_end = np.nanmax(np.concatenate([requests["finish_time"].to_numpy(float), steps["end"].to_numpy(float),
                                      [t0]]))
    duration = max(float(t_end) - t0, 1e-12)
    out_tok = int(requests.loc[done, "num_output_tokens"].sum())
    in_tok = int(requests.loc[done, "prompt_tokens"].sum())
    out: dict[str, Any] = {
        "num_requests": len(requests), "num_finished": int(done.sum()),
        "num_aborted": int((reason == "abort").sum()), "num_rejected": int((reason == "rejected").sum()),
        "num_errored": int((reason == "error").sum()),
        "num_unfinished": int((reason == "").sum()), "duration_s": duration,
        "request_throughput": done.sum() / duration, "output_throughput": out_tok / duration,
        "total_token_throughput": (in_tok + out_tok) / duration,
    }
    fin = requests[done]
    for prefix, col in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2e")):
        _stats(prefix, fin[col].to_numpy(float), out)
    _run_length_stats("itl", *itl_gaps, out)
    out["mean_queueing_ms"] = float(np.nanmean(requests["queueing_time"])) * 1000 if len(requests) else 0.0
    out["mean_hol_blocking_ms"] = float(requests["hol_blocking_time"].mean()) * 1000 if len(requests) else 0.0
    out["p99_hol_blocking_ms"] = (float(np.percentile(requests["hol_blocking_time"], 99)) * 1000
                                  if len(requests) else 0.0)
    _goodput(fin, cfg, duration, out)
    busy_figures(timeline, out)
    _counters(requests, steps, duration, out)
    out["sim_wall_s"] = sim_wall_s
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}


def _goodput(fin: pd.DataFrame, cfg: RunConfig, duration: float, out: dict[str, Any]) -> None:
    """Finished requests per second meeting every configured SLO (vLLM's --goodput)."""
    ok = np.ones(len(fin), dtype=bool)
    for slo, col in ((cfg.slo_ttft_ms, "ttft"), (cfg.slo_tpot_ms, "tpot"), (cfg.slo_e2el_ms, "e2e")):
        if slo is not None:
            v = fin[col].to_numpy(float) * 1000.0
            ok &= np.isnan(v) | (v <= slo) if col == "tpot" else (v <= slo)
    out["request_goodput"] = float(ok.sum()) / duration
    out["slo"] = {"ttft_ms": cfg.slo_ttft_ms, "tpot_ms": cfg.slo_tpot_ms, "e2el_ms": cfg.slo_e2el_ms}


def _counters(requests: pd.DataFrame, steps: pd.DataFrame, duration: float, out: dict[str, Any]) -> None:
    """Preemptions, pauses, recompute, KV usage and step counts."""
    out["num_preemptions"] = int(requests["num_preemptions"].sum())
    out["num_pauses"] = int(requests["num_pauses"].sum())
    out["preemption_rate"] = out["num_preemptions"] / duration
    out["recomputed_tokens"] = int(requests["num_recomputed_tokens"].sum())
    out["truncated_tokens"] = int(requests["num_truncated_tokens"].sum())
    busy = steps[(steps["num_prefill_tokens"] + steps["num_decode_tokens"]) > 0]
    out["mean_kv_usage"] = float(busy["kv_usage"].mean()) if len(busy) else 0.0
    out["max_kv_usage"] = float(steps["kv_usage"].max()) if len(steps) else 0.0
    out["num_steps"] = int(len(busy))
    out["num_empty_steps"] = int(len(steps) - len(busy))
    computed = int((steps["num_prefill_tokens"] + steps["num_decode_tokens"]).sum())
    out["recomputed_share"] = out["recomputed_tokens"] / computed if computed else 0.0
    out["pauses_per_1k_steps"] = 1000.0 * out["num_pauses"] / len(busy) if len(busy) else 0.0
    out["pauses_per_request"] = out["num_pauses"] / len(requests) if len(requests) else 0.0
    admitted = requests["num_cached_tokens"].notna() & requests["first_scheduled_time"].notna()
    prompt = int(requests.loc[admitted, "prompt_tokens"].sum())
    out["prefix_cache_hit_rate"] = (int(requests.loc[admitted, "num_cached_tokens"].sum()) / prompt
                                    if prompt else 0.0)
