"""Turn the recorder's columnar buffers into the RunResult tables (columns: see sim/results.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import RESOURCES, STEP_FIELDS, TIMELINE_KINDS, MetricsRecorder, output_hash  # noqa: F401 (output_hash re-exported)


def requests_table(m: MetricsRecorder, targets: list[int], rejected: set[str]) -> pd.DataFrame:
    """One row per workload request."""
    b, reqs = m.req, m.requests
    arrival = np.array([r.arrival_time for r in reqs], dtype=float)
    first_token, finish = np.array(b.first_token), np.array(b.finish_time)
    num_out = np.array(b.num_out, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(num_out >= 2, (np.array(b.last_token) - first_token) / (num_out - 1), np.nan)
        itl_n = np.array(b.itl_n, dtype=float)
        mean_itl = np.where(itl_n > 0, np.array(b.itl_sum) / itl_n, np.nan)
    reasons = [("rejected" if r.request_id in rejected else reason)
               for r, reason in zip(reqs, b.finish_reason, strict=True)]
    first_sched = np.array(b.first_sched)
    return pd.DataFrame({
        "request_id": pd.array([r.request_id for r in reqs], dtype="string"),
        "arrival_time": arrival,
        "prompt_tokens": np.array([r.prompt_len for r in reqs], dtype=np.int64),
        "target_output_tokens": np.array(targets, dtype=np.int64),
        "max_tokens": np.array([r.max_tokens for r in reqs], dtype=np.int64),
        "first_scheduled_time": first_sched,
        "queueing_time": first_sched - arrival,
        "first_token_time": first_token,
        "finish_time": finish,
        "ttft": first_token - arrival,
        "tpot": tpot,
        "mean_itl": mean_itl,
        "e2e": finish - arrival,
        "num_output_tokens": num_out,
        "num_cached_tokens": np.array(b.cached, dtype=np.int64),
        "finish_reason": pd.array(reasons, dtype="string"),
        "num_preemptions": np.array([r.num_preemptions for r in reqs], dtype=np.int64),
        "num_pauses": np.array([r.num_pauses for r in reqs], dtype=np.int64),
        "num_recomputed_tokens": np.array([r.num_recomputed_tokens for r in reqs], dtype=np.int64),
        "num_truncated_tokens": np.array([r.num_truncated_tokens for r in reqs], dtype=np.int64),
        "hol_blocking_time": m.hol.per_request(),
        "output_hash": np.array(m.output_hashes(), dtype=np.int64),
    })


def steps_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per launched step."""
    s = m.steps
    cols: dict[str, object] = {"step": np.arange(len(s["schedule_time"]), dtype=np.int64)}
    for name in STEP_FIELDS:
        col = np.array(s[name])
        cols[name] = col.astype(bool) if name == "deferred_sampling" else col
        if name == "end":
            cols["duration"] = cols["end"] - cols["start"]
    return pd.DataFrame(cols)


def timeline_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per CPU or GPU busy interval, in time order."""
    res, kind, start, end, step = m.timeline
    res_codes = np.frombuffer(res, dtype=np.int8) if res else np.zeros(0, dtype=np.int8)
    kind_codes = np.frombuffer(kind, dtype=np.int8) if kind else np.zeros(0, dtype=np.int8)
    df = pd.DataFrame({"resource": pd.Categorical.from_codes(res_codes, categories=list(RESOURCES)),
                       "kind": pd.array(np.array(TIMELINE_KINDS, dtype=object)[kind_codes],
                                        dtype="string"),
                       "start": np.frombuffer(start, dtype=float) if start else np.zeros(0),
                       "end": np.frombuffer(end, dtype=float) if end else np.zeros(0),
                       "step": np.frombuffer(step, dtype=np.int32).astype(np.int64) if step
                       else np.zeros(0, dtype=np.int64)})
    return df.sort_values(["start", "resource"], kind="stable").reset_index(drop=True)


def itl_table(m: MetricsRecorder) -> pd.DataFrame:
    """One row per delivered token (only when recorded); a first token's itl is its TTFT."""
    ids, pos, times = (np.frombuffer(a, dtype=d).copy() if len(a) else np.zeros(0, dtype=d)
                       for a, d in zip(m.itl_rows, (np.int32, np.int32, float), strict=True))
    order = np.lexsort((pos, ids))
    ids, pos, times = ids[order], pos[order], times[order]
    arrival = np.array([r.arrival_time for r in m.requests], dtype=float)
    prev = np.empty_like(times)
    if len(times):
        prev[0] = arrival[ids[0]]
        prev[1:] = np.where(ids[1:] == ids[:-1], times[:-1], arrival[ids[1:]])
    rid = np.array([r.request_id for r in m.requests], dtype=object)
    return pd.DataFrame({"request_id": pd.array(rid[ids], dtype="string"),
                         "token_index": pos.astype(np.int64), "time": times, "itl": times - prev})
