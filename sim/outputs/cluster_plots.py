"""PNG plots of a cluster run: each replica's load over time as the router saw it, the routing
mix (decisions by replica and reason), and with prefill/decode pools the KV transfers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from schedsim.outputs.plots import save_figure, thin_rows

CLUSTER_PLOTS = ("replica_load.png", "routing_mix.png")
TRANSFER_PLOT = "kv_transfers.png"


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


def plot_kv_transfers(transfers: pd.DataFrame, path: Path | None = None) -> Figure:
    """Each KV transfer's time (queued for the GPU, then on the link) against its size, and the
    bytes in flight over time."""
    fig = Figure(figsize=(11, 6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    done = transfers[transfers["end_time"].notna()]
    mb = done["bytes"] / 1e6
    ax1.scatter(mb, done["transfer_time"] * 1e3, s=8, label="on the link")
    ax1.scatter(mb, done["queued_time"] * 1e3, s=8, marker="x", label="queued for the GPU")
    ax1.set(xlabel="KV bytes (MB)", ylabel="time (ms)", title="KV transfers")
    ax1.legend(loc="upper left", fontsize="small")
    if len(done):
        times = pd.concat([done["start_time"], done["end_time"]]).to_numpy()
        steps = pd.concat([mb, -mb]).to_numpy()
        order = times.argsort(kind="stable")
        ax2.plot(times[order], steps[order].cumsum(), drawstyle="steps-post", lw=0.8)
    ax2.set(xlabel="simulated time (s)", ylabel="MB in flight", title="KV bytes in flight")
    return save_figure(fig, path)


def write_cluster_plots(result: Any, out: Path) -> list[Path]:
    """The cluster's PNGs, for a result with routing and load tables (none otherwise)."""
    routing, load = getattr(result, "routing", None), getattr(result, "load", None)
    if routing is None or load is None:
        return []
    plot_replica_load(load, out / CLUSTER_PLOTS[0])
    plot_routing_mix(routing, out / CLUSTER_PLOTS[1])
    written = [out / name for name in CLUSTER_PLOTS]
    transfers = getattr(result, "transfers", None)
    if transfers is not None:
        plot_kv_transfers(transfers, out / TRANSFER_PLOT)
        written.append(out / TRANSFER_PLOT)
    return written
