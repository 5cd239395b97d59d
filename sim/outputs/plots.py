"""PNG plots of one run, of a comparison and of a sweep (matplotlib's object API: no GUI backend)."""

from __future__ import annotations

from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from schedsim.outputs.figures import RUN_PLOTS

MAX_BINS = 300  # time bins for rates over time (keeps the PNGs readable for long traces)
MAX_POINTS = 20_000  # points per line before down-sampling
TIMELINE_STEPS = 8  # steps shown interval by interval in the busy timeline's zoomed panel
MIN_BAR_FRACTION = 1 / 1000  # a GPU step narrower than this share of the zoom is under a pixel
IDLE_GAP_STEPS = 4  # a GPU idle gap longer than this many median step cycles ends the zoom
KIND_COLORS = {
    "schedule": "tab:blue",
    "prepare_inputs": "tab:cyan",
    "d2h_copy": "tab:purple",
    "update_from_output": "tab:olive",
    "forward": "tab:green",
    "sample": "tab:red",
}


def save_figure(fig: Figure, path: Path | None) -> Figure:
    """Write the figure if a path is given; always hand it back (notebooks display it)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)  # the constrained layout already fits the figure
    return fig


def thin_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Every k-th row so a line plot stays under MAX_POINTS points."""
    return df.iloc[:: max(1, len(df) // MAX_POINTS)]


def _bins(t_end: float) -> np.ndarray:
    """Bin edges over [0, t_end] for rates over time."""
    return np.linspace(0.0, max(t_end, 1e-9), MAX_BINS + 1)


def rate_over_time(
    times: pd.Series, weights: pd.Series | None, t_end: float
) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres, amount per second) of events at `times`."""
    edges = _bins(t_end)
    t = times.to_numpy(dtype=float)
    w = None if weights is None else weights.to_numpy(dtype=float)
    ok = ~np.isnan(t)
    counts, _ = np.histogram(t[ok], bins=edges, weights=None if w is None else w[ok])
    return (edges[:-1] + edges[1:]) / 2, counts / np.diff(edges)


def plot_latency_distributions(requests: pd.DataFrame, path: Path | None = None) -> Figure:
    """Histograms of TTFT and TPOT with median and p99 marked: where the tail sits."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    for ax, col, name in zip(fig.subplots(1, 2), ("ttft", "tpot"), ("TTFT", "TPOT"), strict=True):
        ms = requests[col].dropna() * 1e3
        if len(ms):
            ax.hist(ms, bins=60, color="tab:blue", alpha=0.8)
            for q, style in ((0.5, "--"), (0.99, ":")):
                v = ms.quantile(q)
                ax.axvline(v, color="k", ls=style, label=f"p{int(q * 100)} = {v:.1f} ms")
            distinct_legend(ax)
        else:
            ax.text(0.5, 0.5, f"no {name} values", ha="center", transform=ax.transAxes)
        ax.set(xlabel=f"{name} (ms)", ylabel="requests", title=f"{name} distribution (n={len(ms)})")
    return save_figure(fig, path)


def plot_batch_and_kv(steps: pd.DataFrame, path: Path | None = None) -> Figure:
    """Prefill vs decode token rate, requests per step, and KV usage over simulated time."""
    fig = Figure(figsize=(11, 8), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    if len(steps):
        t_end = float(steps["end"].max())
        x, pre = rate_over_time(steps["end"], steps["num_prefill_tokens"], t_end)
        _, dec = rate_over_time(steps["end"], steps["num_decode_tokens"], t_end)
        ax1.stackplot(x, pre, dec, labels=["prefill tokens/s", "decode tokens/s"], alpha=0.8)
        s = thin_rows(steps)
        ax2.plot(s["start"], s["num_decode_reqs"], drawstyle="steps-post", label="decode requests")
        ax2.plot(s["start"], s["num_prefill_reqs"], drawstyle="steps-post", label="prefill requests")
        ax2.plot(s["start"], s["num_waiting"], drawstyle="steps-post", label="waiting", alpha=0.6)
        ax3.plot(s["start"], s["kv_usage"] * 100, color="tab:red", drawstyle="steps-post")
        distinct_legend(ax1, loc="upper right")
        distinct_legend(ax2, loc="upper right")
    ax1.set(ylabel="tokens/s", title="Batch composition over time")
    ax2.set(ylabel="requests per step")
    ax3.set(ylabel="KV usage (%)", xlabel="simulated time (s)")
    ax3.set_ylim(bottom=0)
    return save_figure(fig, path)


def distinct_legend(ax: Any, **kw: Any) -> None:
    """A legend with each label once (the first artist drawn under it), none when nothing is labelled."""
    handles, labels = ax.get_legend_handles_labels()
    first: dict[str, Any] = {}
    for handle, label in zip(handles, labels, strict=True):
        first.setdefault(label, handle)
    if first:
        ax.legend(list(first.values()), list(first), **kw)


def _time_unit(span_s: float) -> tuple[float, str]:
    """Scale and unit for a window of `span_s` seconds: ms below one second, else s."""
    return (1e3, "ms") if span_s < 1.0 else (1.0, "s")


def _broken_bars(ax: Any, timeline: pd.DataFrame, t0: float, t1: float) -> None:
    """CPU and GPU busy intervals inside [t0, t1], coloured by kind, timed from the window start.

    Each interval gets a thin white edge, so back-to-back GPU steps read as steps, not one bar;
    a GPU row whose steps are too narrow to see at this scale says so instead.
    """
    scale, unit = _time_unit(t1 - t0)
    span = max((t1 - t0) * scale, 1e-12)
    window = timeline[(timeline["end"] >= t0) & (timeline["start"] <= t1)]
    for row, resource in enumerate(("gpu", "cpu")):
        part = window[window["resource"] == resource]
        widths = (part["end"] - part["start"]).to_numpy(float) * scale
        dense = resource == "gpu" and len(part) > 0 and float(np.median(widths)) < span * MIN_BAR_FRACTION
        for kind, grp in part.groupby("kind", sort=True, observed=True):
            spans = list(zip((grp["start"] - t0) * scale, (grp["end"] - grp["start"]) * scale, strict=True))
            ax.broken_barh(
                spans,
                (row - 0.4, 0.8),
                facecolors=KIND_COLORS.get(str(kind), "tab:gray"),
                edgecolor="none" if dense else "white",
                linewidth=0.0 if dense else 0.8,
                label=str(kind),
            )
        if dense:
            ax.text(
                0.5 * span,
                row,
                f"{len(part)} GPU steps: too dense to draw one by one at this scale",
                ha="center",
                va="center",
                fontsize="small",
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
            )
    ax.set(
        yticks=[0, 1],
        yticklabels=["GPU", "CPU"],
        xlim=(0.0, span),
        xlabel=f"time from the window start at t = {t0:,.3f} s ({unit})",
    )
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    distinct_legend(ax, loc="upper right", ncols=3, fontsize="small")


def zoom_steps(timeline: pd.DataFrame, n: int = TIMELINE_STEPS) -> np.ndarray:
    """Up to `n` consecutive steps from the middle of the run (past the warm-up, where the overlap
    is typical) that run back to back: the window never spans an idle gap, which would shrink
    every step to a sliver."""
    gpu = timeline[(timeline["resource"] == "gpu") & (timeline["step"] >= 0)].sort_values("start")
    if not len(gpu):
        return np.sort(timeline.loc[timeline["step"] >= 0, "step"].unique())[:n]
    steps = gpu["step"].to_numpy()
    start, end = gpu["start"].to_numpy(float), gpu["end"].to_numpy(float)
    cycle = float(np.median(np.diff(start))) if len(start) > 1 else 0.0  # launch to launch
    gap_ok = start[1:] - end[:-1] <= IDLE_GAP_STEPS * max(cycle, 1e-9)
    lo = hi = len(steps) // 2  # grow [lo, hi] forward, then backward, across small gaps only
    while hi - lo + 1 < n and hi + 1 < len(steps) and gap_ok[hi]:
        hi += 1
    while hi - lo + 1 < n and lo > 0 and gap_ok[lo - 1]:
        lo -= 1
    return np.sort(steps[lo : hi + 1])


def plot_busy_timeline(timeline: pd.DataFrame, path: Path | None = None) -> Figure:
    """A zoom on a few steps' CPU/GPU intervals, and the busy fraction of each over the run."""
    fig = Figure(figsize=(11, 7), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1)
    first = shown = 0
    if len(timeline):
        window = zoom_steps(timeline)
        first, shown = (int(window[0]) if len(window) else 0), len(window)
        zoom = timeline[timeline["step"].isin(window)] if len(window) else timeline
        _broken_bars(ax1, timeline, float(zoom["start"].min()), float(zoom["end"].max()))
        t_end = float(timeline["end"].max())
        for resource in ("gpu", "cpu"):
            part = timeline[timeline["resource"] == resource]
            x, busy = _busy_fraction(part, t_end)
            ax2.plot(x, busy * 100, label=resource.upper())
        distinct_legend(ax2)
    ax1.set_title(f"CPU/GPU busy intervals of {shown} steps from step {first}")
    ax2.set(xlabel="simulated time (s)", ylabel="busy (%)", ylim=(0, 105), title="Busy fraction over time")
    return save_figure(fig, path)


def _busy_fraction(part: pd.DataFrame, t_end: float) -> tuple[np.ndarray, np.ndarray]:
    """Busy seconds per second of each time bin (intervals split exactly across bins)."""
    edges = _bins(t_end)
    cum = _cumulative_busy(part["start"].to_numpy(float), part["end"].to_numpy(float), edges)
    return (edges[:-1] + edges[1:]) / 2, np.diff(cum) / np.diff(edges)


def _cumulative_busy(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time up to each t: sum(t - start | start < t) - sum(t - end | end < t), in O(n log n)."""
    out = np.zeros(len(t))
    for arr, sign in ((np.sort(start), 1.0), (np.sort(end), -1.0)):
        csum = np.concatenate([[0.0], np.cumsum(arr)])
        k = np.searchsorted(arr, t, side="left")
        out += sign * (k * t - csum[k])
    return out


def write_run_plots(result: Any, out: Path, remote: dict[str, Any] | None = None) -> list[Path]:
    """The PNGs of `schedsim run` (latency distributions, batch/KV, busy timeline); returns their
    paths. `remote` maps a file name to a future of a worker rendering it (plot_worker); any the
    worker fails to deliver is rendered here."""
    remote = remote or {}
    figures = [(name, globals()[func], getattr(result, table)) for name, func, table in RUN_PLOTS]
    for name, plot, table in figures:
        if name not in remote:
            plot(table, out / name)
    for name, plot, table in figures:
        future: Future[str] | None = remote.get(name)
        if future is not None and not _delivered(future):
            plot(table, out / name)
    return [out / name for name, _, _ in figures]


def _delivered(future: Any) -> bool:
    """Whether the worker wrote its figure; a worker that died (or never started) did not."""
    try:
        future.result()
    except (BrokenProcessPool, CancelledError):
        return False
    return True
