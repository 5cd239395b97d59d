"""Overlaid plots for `schedsim compare` and metric-against-knob plots for `schedsim sweep`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from schedsim.outputs.plots import rate_over_time, save_figure, thin_rows


def _cdf(ax: Any, values: pd.Series, label: str) -> None:
    """Empirical CDF of a seconds column, drawn in ms."""
    ms = np.sort(values.dropna().to_numpy(float) * 1e3)
    ms = ms[ms > 0]  # log axis; a latency is never 0
    if len(ms):
        ax.plot(ms, np.arange(1, len(ms) + 1) / len(ms), label=label, drawstyle="steps-post")


def plot_latency_cdfs(results: Mapping[str, Any], path: Path | None = None) -> Figure:
    """TTFT and TPOT CDFs of every variant on shared axes: the tail difference at a glance."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for label, result in results.items():
        for ax, col in zip(axes, ("ttft", "tpot"), strict=True):
            _cdf(ax, result.requests[col], label)
    for ax, name in zip(axes, ("TTFT", "TPOT"), strict=True):
        ax.set(xlabel=f"{name} (ms)", ylabel="fraction of requests", title=f"{name} CDF", ylim=(0, 1.02))
        if ax.lines:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def plot_over_time(results: Mapping[str, Any], path: Path | None = None) -> Figure:
    """Token throughput, finished requests per second and KV usage over time, one line per variant."""
    fig = Figure(figsize=(11, 9), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    t_end = max((float(r.steps["end"].max()) for r in results.values() if len(r.steps)), default=1.0)
    for label, r in results.items():
        st = r.steps
        if len(st):
            x, tok = rate_over_time(st["end"], st["num_prefill_tokens"] + st["num_decode_tokens"], t_end)
            ax1.plot(x, tok, label=label)
            s = thin_rows(st)
            ax3.plot(s["start"], s["kv_usage"] * 100, label=label, drawstyle="steps-post", alpha=0.8)
        x, fin = rate_over_time(r.requests["finish_time"], None, t_end)
        ax2.plot(x, fin, label=label)
    ax1.set(ylabel="tokens/s (prefill+decode)", title="Throughput and KV usage over time")
    ax2.set(ylabel="finished requests/s")
    ax3.set(ylabel="KV usage (%)", xlabel="simulated time (s)", ylim=(0, 105))
    for ax in (ax1, ax2, ax3):
        ax.legend(fontsize="small", loc="upper right")
    return save_figure(fig, path)


def plot_compare(results: Mapping[str, Any], out: Path) -> list[Path]:
    """The overlaid PNGs of `schedsim compare`."""
    paths = [out / "cdf_latency.png", out / "over_time.png"]
    plot_latency_cdfs(results, paths[0])
    plot_over_time(results, paths[1])
    return paths


def plot_metric_vs_knob(
    table: pd.DataFrame, x: str, metric: str, group_by: Sequence[str], path: Path | None = None
) -> Figure:
    """One metric against the swept knob, one line per policy (and per other swept knob)."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    groups = [g for g in group_by if g in table.columns and g != x]
    parts = table.groupby(groups, sort=True, dropna=False) if groups else [("all", table)]
    for key, grp in parts:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(k) if g == "policy" else f"{g}={k}" for g, k in zip(groups, key, strict=False))
        grp = grp.sort_values(x)
        ax.plot(grp[x], grp[metric], marker="o", label=label or metric)
    ax.set(xlabel=x, ylabel=metric, title=f"{metric} vs {x}")
    xs = pd.to_numeric(table[x], errors="coerce")
    if xs.notna().all() and xs.min() > 0 and xs.max() / xs.min() >= 16:
        ax.set_xscale("log")  # knobs swept geometrically (rates, scales) read best on a log axis
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def plot_sweep(
    table: pd.DataFrame, x: str, metrics: Sequence[str], out: Path, group_by: Sequence[str] = ("policy",)
) -> list[Path]:
    """A PNG per metric (present in the table) against the knob `x`."""
    if x not in table.columns:
        raise ValueError(f"sweep plot: the x knob {x!r} is not a column of the results table")
    paths = []
    for metric in metrics:
        if metric in table.columns and table[metric].notna().any():
            path = out / f"sweep_{metric}_vs_{x}.png"
            plot_metric_vs_knob(table, x, metric, group_by, path)
            paths.append(path)
    return paths
