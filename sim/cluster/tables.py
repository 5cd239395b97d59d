"""The cluster's tables: routing decisions, per-replica load over time, and the replicas' tables
merged into cluster-wide ones (each row tagged with its replica)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from schedsim.cluster.routing import RoutingLog


def routing_table(log: RoutingLog, ids: Sequence[str]) -> pd.DataFrame:
    """One row per routing decision: when, which request, where, why, and the loads it saw."""
    time = np.asarray(log.time.array(), dtype=float)
    rows = np.asarray(log.row.array(), dtype=np.int64)
    names = sorted(log.reasons, key=log.reasons.__getitem__)
    codes = np.asarray(log.reason_code.array(), dtype=np.int64)
    total = np.asarray(log.total_outstanding.array(), dtype=np.int64)
    hi = np.asarray(log.max_outstanding.array(), dtype=np.int64)
    mean = total / max(log.num_replicas, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        imbalance = np.where(mean > 0, hi / mean, 1.0)
    return pd.DataFrame(
        {
            "time": time,
            "request_id": pd.array([ids[r] for r in rows], dtype="string"),
            "row": rows,
            "replica": np.asarray(log.replica.array(), dtype=np.int64),
            "reason": pd.Categorical.from_codes(codes, categories=names) if names else pd.Categorical([]),
            "chosen_outstanding": np.asarray(log.chosen_outstanding.array(), dtype=np.int64),
            "min_outstanding": np.asarray(log.min_outstanding.array(), dtype=np.int64),
            "max_outstanding": hi,
            "mean_outstanding": mean,
            "imbalance": imbalance,
        }
    )


def load_table(log: RoutingLog) -> pd.DataFrame:
    """One row per routing decision and replica: the load the router saw there."""
    n = log.num_replicas
    time = np.repeat(np.asarray(log.time.array(), dtype=float), n)
    return pd.DataFrame(
        {
            "time": time,
            "replica": np.tile(np.arange(n, dtype=np.int64), len(log.time)),
            "outstanding": np.asarray(log.load_outstanding.array(), dtype=np.int64),
            "running": np.asarray(log.load_running.array(), dtype=np.int64),
            "waiting": np.asarray(log.load_waiting.array(), dtype=np.int64),
            "kv_usage": np.asarray(log.load_kv.array(), dtype=float),
        }
    )


def merged_requests(tables: Sequence[pd.DataFrame], assigned: np.ndarray) -> pd.DataFrame:
    """The workload's rows, each from the replica it was routed to (-1: never routed)."""
    cols: dict[str, Any] = {}
    for name in tables[0].columns:
        col = tables[0][name]
        for i, table in enumerate(tables[1:], start=1):
            mask = assigned == i
            if mask.any():
                col = col.where(~mask, table[name])
        cols[name] = col
        if name == "request_id":
            cols["replica"] = assigned.astype(np.int64)
    return pd.DataFrame(cols)


def stacked(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Replicas' tables one after the other, with a leading replica column."""
    parts = []
    for i, table in enumerate(tables):
        part = table.copy(deep=False)
        part.insert(0, "replica", np.full(len(table), i, dtype=np.int64))
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def busy_totals(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The busy-time figures of the fleet: totals, mean GPU idle share, CPU share hidden overall."""
    if len(summaries) == 1:
        return {
            key: summaries[0][key]
            for key in ("gpu_busy_s", "gpu_idle_fraction", "cpu_busy_s", "cpu_hidden_fraction")
        }
    gpu_busy = sum(s["gpu_busy_s"] for s in summaries)
    cpu_busy = sum(s["cpu_busy_s"] for s in summaries)
    hidden = sum(s["cpu_busy_s"] * s["cpu_hidden_fraction"] for s in summaries if s["cpu_busy_s"] > 0)
    idle = [s["gpu_idle_fraction"] for s in summaries if s["gpu_idle_fraction"] == s["gpu_idle_fraction"]]
    return {
        "gpu_busy_s": gpu_busy,
        "gpu_idle_fraction": float(np.mean(idle)) if idle else float("nan"),
        "cpu_busy_s": cpu_busy,
        "cpu_hidden_fraction": hidden / cpu_busy if cpu_busy > 0 else float("nan"),
    }
