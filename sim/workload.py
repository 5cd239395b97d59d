"""Workload table → policy Requests, oracle targets and the fault plan's abort events."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .config import RunConfig
from .oracle import request_key, uniform
from .policies import Request

REQUIRED = ("request_id", "arrival_time", "prompt_tokens", "output_tokens")


@dataclass
class PreparedWorkload:
    """Requests in workload order, which of them are rejected, and the fault plan's events."""

    requests: list[Request]
    targets: list[int]
    rejected: set[str] = field(default_factory=set)
    aborts: list[tuple[float, str]] = field(default_factory=list)
    kv_load_failures: set[str] = field(default_factory=set)


def load(cfg: RunConfig) -> pd.DataFrame:
    """The configured trace, rescaled and truncated as asked."""
    from .traces import load_workload

    df = load_workload(cfg.trace)
    if cfg.max_requests is not None:
        df = df.iloc[: cfg.max_requests]
    if cfg.rate is not None:
        from .traces import scale_rate

        df = scale_rate(df, cfg.rate)
    return df


def _hashes(df: pd.DataFrame, block_size: int) -> list:
    """Prompt block hashes at the policy's block size (None: no prefix information)."""
    if "prompt_block_hashes" not in df.columns:
        return [None] * len(df)
    from .traces import block_hashes_at

    return block_hashes_at(df, block_size)


def _column(df: pd.DataFrame, name: str, default: object) -> list:
    """An optional column as a list with NA replaced by the default."""
    if name not in df.columns:
        return [default] * len(df)
    return [default if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v
            for v in df[name].tolist()]


def prepare(df: pd.DataFrame, cfg: RunConfig, max_model_len: int) -> PreparedWorkload:
    """Build Requests: max_tokens from the row, else a cap; too-long prompts are rejected."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"workload is missing required column(s) {missing}")
    ids = [str(x) for x in df["request_id"].tolist()]
    if len(set(ids)) != len(ids):
        raise ValueError("workload column request_id has duplicate values")
    arrivals = df["arrival_time"].astype(float).tolist()
    prompts = df["prompt_tokens"].astype(int).tolist()
    outputs = df["output_tokens"].astype(int).tolist()
    cols = {name: _column(df, name, d) for name, d in
            (("max_tokens", None), ("structured_output", False), ("priority", 0), ("lora_id", None))}
    hashes = _hashes(df, cfg.block_size)
    out = PreparedWorkload([], [])
    for i, rid in enumerate(ids):
        room = max_model_len - prompts[i]
        cap = cols["max_tokens"][i]
        if cap is not None:
            max_tokens = int(cap)
        elif cfg.max_tokens_source == "output":
            max_tokens = min(outputs[i], max(room, 1))
        else:
            max_tokens = min(cfg.max_tokens_cap or room, max(room, 1))
        if room < 1:
            out.rejected.add(rid)  # vLLM refuses prompts that leave no room to generate
        req = Request(rid, arrivals[i], prompts[i], max(1, max_tokens),
                      prompt_block_hashes=hashes[i],
                      structured_output=bool(cols["structured_output"][i]),
                      priority=int(cols["priority"][i]),
                      lora_id=None if cols["lora_id"][i] is None else int(cols["lora_id"][i]),
                      num_spec_tokens=cfg.num_spec_tokens)
        out.requests.append(req)
        out.targets.append(outputs[i])
    _fault_plan(out, cfg, ids, arrivals)
    return out


def _fault_plan(out: PreparedWorkload, cfg: RunConfig, ids: list[str], arrivals: list[float]) -> None:
    """Explicit and seeded aborts and KV-load failures; unknown ids are errors."""
    known = set(ids)
    for rid in list(cfg.abort_times) + list(cfg.kv_load_failures):
        if rid not in known:
            raise ValueError(f"RunConfig fault plan names request {rid!r}, which is not in the workload")
    out.aborts = [(float(t), rid) for rid, t in cfg.abort_times.items()]
    out.kv_load_failures = set(cfg.kv_load_failures)
    for i, rid in enumerate(ids):
        key = request_key(cfg.seed, rid)
        if cfg.abort_fraction and rid not in cfg.abort_times and uniform(key ^ 0xAB) < cfg.abort_fraction:
            out.aborts.append((arrivals[i] + cfg.abort_window_s * uniform(key ^ 0xCD), rid))
        if cfg.kv_load_failure_fraction and uniform(key ^ 0xEF) < cfg.kv_load_failure_fraction:
            out.kv_load_failures.add(rid)
