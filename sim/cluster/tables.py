"""The cluster's tables: routing decisions, per-replica load over time, and the replicas' tables
merged into cluster-wide ones (each row tagged with its replica)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from schedsim.cluster.routing import RoutingLog
from schedsim.cluster.transfers import TransferLog


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
            "replica": np.tile(np.asarray(log.pool, dtype=np.int64), len(log.time)),
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


def transfers_table(log: TransferLog) -> pd.DataFrame:
    """One row per KV transfer: which request, from which prefill to which decode replica, its
    size, when it was requested, started, finished sending and was delivered."""
    flows = log.flows
    requested = np.asarray(log.requested.array(), dtype=float)
    start = np.asarray(log.start.array(), dtype=float)
    end = np.asarray([f.end for f in flows], dtype=float)
    return pd.DataFrame(
        {
            "request_id": pd.array(log.request_id, dtype="string"),
            "src_replica": np.asarray(log.src.array(), dtype=np.int64),
            "dst_replica": np.asarray(log.dst.array(), dtype=np.int64),
            "link": pd.array([log.link] * len(flows), dtype="string"),
            "tokens": np.asarray(log.tokens.array(), dtype=np.int64),
            "blocks": np.asarray(log.blocks.array(), dtype=np.int64),
            "bytes": np.asarray(log.bytes.array(), dtype=np.int64),
            "requested_time": requested,
            "start_time": start,
            "done_time": np.asarray([f.done for f in flows], dtype=float),
            "end_time": end,
            "queued_time": start - requested,
            "transfer_time": end - start,
            "failed": np.asarray(log.failed.array(), dtype=bool),
        }
    )


def pd_requests(
    tables: Sequence[pd.DataFrame], prefill: np.ndarray, decode: np.ndarray, first_in: np.ndarray
) -> pd.DataFrame:
    """The workload's rows across both sides: output, tokens and finish from the decode replica
    (the prefill replica's where the request never reached the decode pool), the first schedule
    and cache hits from the prefill replica, the prefill side's first token beside them. Where
    the decode side continued after the prefill's first token (`first_in`), the client's stream
    starts with that token: first token, TTFT, token count, TPOT and mean ITL span both sides."""
    final = np.where(decode >= 0, decode, prefill)
    out = merged_requests(tables, final)
    first = merged_requests(tables, prefill)
    for name in ("first_scheduled_time", "queueing_time", "num_cached_tokens"):
        out[name] = first[name]
    if first_in.any():
        _stream_from_prefill(out, first, first_in & (decode >= 0))
    at = out.columns.get_loc("replica") + 1
    out.insert(at, "prefill_replica", prefill.astype(np.int64))
    out.insert(at + 1, "decode_replica", decode.astype(np.int64))
    out["prefill_first_token_time"] = first["first_token_time"]
    out["prefill_finish_time"] = first["finish_time"]
    return out


def _stream_from_prefill(out: pd.DataFrame, first: pd.DataFrame, rows: np.ndarray) -> None:
    """Rows whose first token the prefill side delivered: one stream over both sides."""
    n_dec = out["num_output_tokens"].to_numpy(np.int64)
    dec_first = out["first_token_time"].to_numpy(float)
    tpot = out["tpot"].to_numpy(float)
    mean_itl = out["mean_itl"].to_numpy(float)
    pre_first = first["first_token_time"].to_numpy(float)
    last = np.where(n_dec >= 2, dec_first + np.nan_to_num(tpot) * (n_dec - 1), dec_first)
    n = n_dec + 1
    with np.errstate(invalid="ignore", divide="ignore"):
        new_tpot = np.where(n >= 2, (last - pre_first) / (n - 1), np.nan)
        gaps = np.where(n_dec >= 2, np.nan_to_num(mean_itl) * (n_dec - 1), 0.0) + (dec_first - pre_first)
        new_itl = gaps / n_dec
    arrival = out["arrival_time"].to_numpy(float)
    for name, value in (
        ("first_token_time", pre_first),
        ("ttft", pre_first - arrival),
        ("num_output_tokens", n),
        ("tpot", new_tpot),
        ("mean_itl", new_itl),
    ):
        col = out[name].to_numpy().copy()
        col[rows] = value[rows]
        out[name] = col


def pd_summary(transfers: pd.DataFrame, num_prefill: int, num_decode: int, link: str) -> dict[str, Any]:
    """The disaggregated fleet's figures: pools, bytes moved, transfer times."""
    done = transfers[transfers["end_time"].notna()]
    times = done["transfer_time"].to_numpy(float)
    queued = done["queued_time"].to_numpy(float)
    return {
        "num_prefill_replicas": num_prefill,
        "num_decode_replicas": num_decode,
        "interconnect": link,
        "num_kv_transfers": int(len(transfers)),
        "num_failed_kv_transfers": int(transfers["failed"].sum()),
        "kv_bytes_transferred": int(done["bytes"].sum()),
        "mean_kv_transfer_s": float(times.mean()) if len(times) else float("nan"),
        "p99_kv_transfer_s": float(np.percentile(times, 99)) if len(times) else float("nan"),
        "mean_kv_transfer_queued_s": float(queued.mean()) if len(queued) else float("nan"),
    }
