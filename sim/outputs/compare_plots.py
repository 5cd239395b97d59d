"""Overlaid plots for `schedsim compare` and metric-against-knob plots for `schedsim sweep`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from schedsim.outputs.plots import distinct_legend, rate_over_time, save_figure, thin_rows

# the line styles and markers cycled through after the ten default colours
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")


def line_style(i: int, marker: bool = True) -> dict[str, Any]:
    """The i-th line's look: the ten default colours, then the same colours dashed, dotted, ...
    so no two of up to forty lines (and their legend entries) look alike."""
    cycle = i // 10
    style = {"color": f"C{i % 10}", "linestyle": LINE_STYLES[cycle % len(LINE_STYLES)]}
    if marker:
        style["marker"] = MARKERS[cycle % len(MARKERS)]
    return style


def _cdf(ax: Any, values: pd.Series, label: str, style: dict[str, Any]) -> None:
    """Empirical CDF of a seconds column, drawn in ms."""
    ms = np.sort(values.dropna().to_numpy(float) * 1e3)
    ms = ms[ms > 0]  # log axis; a latency is never 0
    if len(ms):
        ax.plot(ms, np.arange(1, len(ms) + 1) / len(ms), label=label, drawstyle="steps-post", **style)


def plot_latency_cdfs(results: Mapping[str, Any], path: Path | None = None) -> Figure:
    """TTFT and TPOT CDFs of every variant on shared axes: the tail difference at a glance."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for i, (label, result) in enumerate(results.items()):
        for ax, col in zip(axes, ("ttft", "tpot"), strict=True):
            _cdf(ax, result.requests[col], label, line_style(i, marker=False))
    for ax, name in zip(axes, ("TTFT", "TPOT"), strict=True):
        ax.set(xlabel=f"{name} (ms)", ylabel="fraction of requests", title=f"{name} CDF", ylim=(0, 1.02))
        if ax.lines:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        distinct_legend(ax, fontsize="small")
    return save_figure(fig, path)


# (y label, what the series is) of the over-time panels, top to bottom
OVER_TIME = (
    ("tokens/s (prefill+decode)", "tokens"),
    ("finished requests/s", "finished"),
    ("KV usage (%)", "kv"),
)
MAX_OVERLAID = 4  # more variants than this get one row of panels each (small multiples)


def _over_time_series(r: Any, t_end: float) -> dict[str, tuple[Any, Any]]:
    """One variant's (x, y) per over-time panel (a variant with no steps has no tokens or KV line)."""
    series: dict[str, tuple[Any, Any]] = {}
    st = r.steps
    if len(st):
        series["tokens"] = rate_over_time(
            st["end"], st["num_prefill_tokens"] + st["num_decode_tokens"], t_end
        )
        s = thin_rows(st)
        series["kv"] = (s["start"].to_numpy(float), s["kv_usage"].to_numpy(float) * 100)
    series["finished"] = rate_over_time(r.requests["finish_time"], None, t_end)
    return series


def _draw(ax: Any, key: str, xy: tuple[Any, Any], **kw: Any) -> None:
    """One series on its panel (KV usage is a step function)."""
    ax.plot(*xy, drawstyle="steps-post" if key == "kv" else "default", **kw)


def plot_over_time(results: Mapping[str, Any], path: Path | None = None) -> Figure:
    """Token throughput, finished requests per second and KV usage over time: one line per
    variant on shared panels, or one row of panels per variant when there are many."""
    t_end = max((float(r.steps["end"].max()) for r in results.values() if len(r.steps)), default=1.0)
    series = {label: _over_time_series(r, t_end) for label, r in results.items()}
    if len(series) > MAX_OVERLAID:
        fig = _small_multiples(series)
    else:
        fig = Figure(figsize=(11, 9), layout="constrained")
        axes = fig.subplots(3, 1, sharex=True)
        for label, lines in series.items():
            for ax, (_, key) in zip(axes, OVER_TIME, strict=True):
                if key in lines:
                    _draw(ax, key, lines[key], label=label, alpha=0.8 if key == "kv" else 1.0)
        for ax, (ylabel, _) in zip(axes, OVER_TIME, strict=True):
            ax.set(ylabel=ylabel)
            distinct_legend(ax, fontsize="small", loc="upper right")
        axes[0].set_title("Throughput and KV usage over time")
        axes[2].set(xlabel="simulated time (s)", ylim=(0, 105))
    return save_figure(fig, path)


def _small_multiples(series: Mapping[str, Mapping[str, tuple[Any, Any]]]) -> Figure:
    """A row per variant, a column per panel: the variant in colour over the others in grey, on
    shared axes, so many variants stay readable without a legend of look-alike colours."""
    n = len(series)
    fig = Figure(figsize=(13, 1.7 * n + 1.0), layout="constrained")
    axes = fig.subplots(n, len(OVER_TIME), sharex=True, sharey="col", squeeze=False)
    colors = [f"C{i % 10}" for i in range(n)]
    for row, (label, lines) in enumerate(series.items()):
        for col, (ylabel, key) in enumerate(OVER_TIME):
            ax = axes[row][col]
            for other, other_lines in series.items():
                if other != label and key in other_lines:
                    _draw(ax, key, other_lines[key], color="0.85", linewidth=0.8)
            if key in lines:
                _draw(ax, key, lines[key], color=colors[row], linewidth=1.2)
            if row == 0:
                ax.set_title(ylabel, fontsize="medium")
            if col == 0:
                ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize="small")
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)")
    fig.suptitle("Throughput and KV usage over time, one row per variant (others in grey)")
    return fig


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
    for i, (key, grp) in enumerate(parts):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(k) if g == "policy" else f"{g}={k}" for g, k in zip(groups, key, strict=False))
        grp = grp.sort_values(x)
        ax.plot(grp[x], grp[metric], label=label or metric, **line_style(i))
    ax.set(xlabel=x, ylabel=metric, title=f"{metric} vs {x}")
    xs = pd.to_numeric(table[x], errors="coerce")
    if xs.notna().all() and xs.min() > 0 and xs.max() / xs.min() >= 16:
        ax.set_xscale("log")  # knobs swept geometrically (rates, scales) read best on a log axis
    ax.grid(alpha=0.3)
    distinct_legend(ax, fontsize="small")
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
