"""`schedsim trace stats`: counts, rate over time, length percentiles, prefix sharing, a plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .prefix import prefix_sharing

PERCENTILES = (50, 90, 99)


@dataclass
class TraceStats:
    """Tidy tables: one summary row, one row per time bin, one row per length column."""

    summary: pd.DataFrame
    rate: pd.DataFrame
    lengths: pd.DataFrame

    def to_text(self) -> str:
        """Human-readable block for the CLI."""
        s = self.summary.iloc[0]
        head = "\n".join(f"{k:>24}: {v}" for k, v in s.items())
        return (
            f"{head}\n\nlength percentiles (tokens):\n{self.lengths.to_string()}\n\n"
            f"rate over time (req/s):\n{self.rate.to_string(index=False, max_rows=24)}"
        )


def trace_stats(df: pd.DataFrame, block_size: int = 16, bins: int = 60) -> TraceStats:
    """Summary of a Workload; prefix sharing assumes an unbounded cache at `block_size`."""
    t = df["arrival_time"].to_numpy(dtype=float)
    span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    share = (
        prefix_sharing(df, block_size)
        if "prompt_block_hashes" in df.columns
        else {"prefix_sharing_ratio": 0.0, "cacheable_tokens": 0.0}
    )
    summary = {
        "source": str(df.attrs.get("source", "")),
        "requests": len(df),
        "duration_s": span,
        "mean_rate_rps": (len(t) - 1) / span if span > 0 else float("nan"),
        "prompt_tokens_total": int(df["prompt_tokens"].sum()),
        "output_tokens_total": int(df["output_tokens"].sum()),
        "prefix_sharing_ratio": share["prefix_sharing_ratio"],
        "prefix_block_size": block_size,
        "sessions": int(df["session_id"].nunique()) if "session_id" in df.columns else 0,
        "skipped_rows": int(df.attrs.get("skipped_rows", {}).get("count", 0)),
        "filtered_rows": int(df.attrs.get("filtered_rows", 0)),
    }
    if "request_class" in df.columns:
        counts = df["request_class"].value_counts(dropna=False)
        summary["classes"] = ", ".join(f"{k}:{v}" for k, v in counts.items())
    return TraceStats(pd.DataFrame([summary]), _rate_table(t, bins), _length_table(df))


def _rate_table(t: np.ndarray, bins: int) -> pd.DataFrame:
    """Arrivals per equal-width time bin, as a rate."""
    if len(t) == 0:
        return pd.DataFrame({"t_start_s": [], "requests": [], "rate_rps": []})
    hi = max(float(t[-1]), 1e-9)
    counts, edges = np.histogram(t, bins=bins, range=(0.0, hi))
    width = edges[1] - edges[0]
    return pd.DataFrame({"t_start_s": edges[:-1], "requests": counts, "rate_rps": counts / width})


def _length_table(df: pd.DataFrame) -> pd.DataFrame:
    """min/mean/percentiles/max per length column."""
    rows = {}
    for col in ("prompt_tokens", "output_tokens"):
        v = df[col].to_numpy(dtype=float)
        if len(v) == 0:
            continue
        row = {"min": v.min(), "mean": v.mean()}
        row.update({f"p{p}": np.percentile(v, p) for p in PERCENTILES})
        row["max"] = v.max()
        rows[col] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def plot_workload(df: pd.DataFrame, path: str | Path, bins: int = 60) -> Path:
    """PNG: arrival rate over time, lengths over time, and length histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = df["arrival_time"].to_numpy(dtype=float)
    rate = _rate_table(t, bins)
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    ax[0, 0].step(rate["t_start_s"], rate["rate_rps"], where="post")
    ax[0, 0].set(title="arrival rate", xlabel="time (s)", ylabel="req/s")
    # log10 values on linear axes: matplotlib's log-axis tick layout is very slow here
    for col, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        ax[0, 1].scatter(
            t, np.log10(df[col].to_numpy(dtype=float)), s=2, alpha=0.4, label=label, rasterized=True
        )
    ax[0, 1].set(title="lengths over time", xlabel="time (s)", ylabel="log10(tokens)")
    ax[0, 1].legend(markerscale=4, loc="upper right")
    for a, col in zip(ax[1], ("prompt_tokens", "output_tokens"), strict=True):
        v = df[col].to_numpy(dtype=float)
        if len(v):
            a.hist(np.log10(v), bins=50)
        a.set(title=col, xlabel="log10(tokens)", ylabel="requests")
    fig.suptitle(str(df.attrs.get("source", "workload")))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
