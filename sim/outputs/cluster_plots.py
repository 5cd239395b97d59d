"""PNG plots of a cluster run: each replica's load over time as the router saw it, and the
routing mix (decisions by replica and reason)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from schedsim.outputs.plots import save_figure, thin_rows

CLUSTER_PLOTS = ("replica_load.png", "routing_mix.png")


def plot_replica_load(load: pd.DataFrame, path: Path | None = None) -> Figure:
    """Outstanding requests and KV usage of every replica at each routing decision."""
    fig = Figure(figsize=(11, 6), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for replica, part in load.groupby("replica", sort=True):
        part = thin_rows(part)
        ax1.plot(
            part["time"], part["outstanding"], drawstyle="steps-post", lw=0.8, label=f"replica {replica}"
        )
        ax2.plot(part["time"], part["kv_usage"] * 100, drawstyle="steps-post", lw=0.8)
    if load["replica"].nunique() <= 16:
        ax1.legend(loc="upper right", ncols=4, fontsize="small")
    ax1.set(ylabel="outstanding requests", title="Load per replica, as the router saw it")
    ax2.set(ylabel="KV usage (%)", xlabel="simulated time (s)")
    return save_figure(fig, path)


def plot_routing_mix(routing: pd.DataFrame, path: Path | None = None) -> Figure:
    """Routing decisions per replica, stacked by reason."""
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    if len(routing):
        mix = routing.groupby(["replica", "reason"], observed=True).size().unstack(fill_value=0)
        bottom = pd.Series(0, index=mix.index)
        for reason in mix.columns:
            ax.bar(mix.index, mix[reason], bottom=bottom, label=str(reason))
            bottom = bottom + mix[reason]
        ax.legend(loc="upper right", fontsize="small")
        ax.set_xticks(list(mix.index))
    ax.set(xlabel="replica", ylabel="requests routed", title="Routing mix")
    return save_figure(fig, path)


def write_cluster_plots(result: Any, out: Path) -> list[Path]:
    """The cluster's PNGs, for a result with routing and load tables (none otherwise)."""
    routing, load = getattr(result, "routing", None), getattr(result, "load", None)
    if routing is None or load is None:
        return []
    plot_replica_load(load, out / CLUSTER_PLOTS[0])
    plot_routing_mix(routing, out / CLUSTER_PLOTS[1])
    return [out / name for name in CLUSTER_PLOTS]
