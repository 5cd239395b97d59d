"""Workload table → columns, oracle targets and the fault plan; Requests are built when they arrive."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import Request
from schedsim.run.config import RunConfig
from schedsim.run.fieldtypes import field_error
from schedsim.traces import block_hashes_at, load_workload, scale_rate
from schedsim.worlds.arrivals import RowRequests
from schedsim.worlds.oracle import request_key, uniform

REQUIRED = ("request_id", "arrival_time", "prompt_tokens", "output_tokens")
# Simulated times are float64 seconds: past 2**53 microseconds (~285 years) a step's duration
# no longer survives being added to the clock, so timings and plots would be noise.
MAX_ARRIVAL_S = 2.0**53 * 1e-6


@dataclass
class PreparedWorkload:
    """The workload as columns, which requests are rejected, and the fault plan's events.

    A million-request workload keeps only these arrays; `request(i)` builds row i's Request when
    it arrives (and the finished one is dropped), so memory stays flat over long traces.
    """

    columns: WorkloadColumns
    targets: np.ndarray
    structured: np.ndarray
    lora: list
    hashes: list
    num_spec_tokens: int = 0
    rejected: set[str] = field(default_factory=set)
    aborts: list[tuple[float, str]] = field(default_factory=list)
    kv_load_failures: set[str] = field(default_factory=set)
    _requests: list[Request] | None = None
    row_requests: RowRequests = field(init=False, repr=False)  # builds a row's Request from the columns

    def __len__(self) -> int:
        return len(self.columns)

    def __post_init__(self) -> None:
        """The row builder reads the columns as given (they are not replaced afterwards)."""
        self.row_requests = RowRequests(
            self.columns, self.hashes, self.structured, self.lora, self.num_spec_tokens
        )

    def request(self, i: int) -> Request:
        """A fresh, unscheduled Request for workload row i."""
        return self.row_requests.request(i)

    @property
    def requests(self) -> list[Request]:
        """Every row's Request, built once (small runs: the real backend, tests)."""
        if self._requests is None:
            self._requests = [self.request(i) for i in range(len(self))]
        return self._requests

    @requests.setter
    def requests(self, value: list[Request]) -> None:
        self._requests = list(value)

    def arrival_rows(self) -> np.ndarray:
        """Workload rows that reach the engine (all but the rejected), in workload order."""
        if not self.rejected:
            return np.arange(len(self))
        return np.array(
            [i for i, rid in enumerate(self.columns.ids) if rid not in self.rejected], dtype=np.int64
        )


def trace_options(cfg: RunConfig) -> dict[str, Any]:
    """The loader options the config asks for (only those set: a generator spec takes none)."""
    opts = {"sort": cfg.trace_sort, "skip_bad": cfg.trace_skip_bad}
    return {k: v for k, v in opts.items() if v}


def load_trace(cfg: RunConfig) -> pd.DataFrame:
    """The configured trace, read with the config's loader options, whole."""
    return load_workload(cfg.trace, **trace_options(cfg))


def load(cfg: RunConfig) -> pd.DataFrame:
    """The configured trace, truncated and rescaled as asked."""
    return select(load_trace(cfg), cfg)


def select(df: pd.DataFrame, cfg: RunConfig) -> pd.DataFrame:
    """The first max_requests rows, arrivals rescaled to the configured rate."""
    if cfg.max_requests is not None:
        df = df.iloc[: cfg.max_requests]
    if cfg.rate is not None:
        df = scale_rate(df, cfg.rate)
    return df


def _hashes(df: pd.DataFrame, block_size: int) -> list:
    """Prompt block hashes at the policy's block size (None: no prefix information)."""
    if "prompt_block_hashes" not in df.columns:
        return [None] * len(df)
    return block_hashes_at(df, block_size)


def _column(df: pd.DataFrame, name: str, default: object) -> list:
    """An optional column as a list with NA replaced by the default."""
    if name not in df.columns:
        return [default] * len(df)
    return [
        default if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v
        for v in df[name].tolist()
    ]


def _max_tokens(df: pd.DataFrame, cfg: RunConfig, room: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """The row's max_tokens where given, else the configured source, never below 1."""
    if cfg.max_tokens_source == "output":
        fallback = np.minimum(outputs, np.maximum(room, 1))
    else:
        fallback = np.minimum(cfg.max_tokens_cap or room, np.maximum(room, 1))
    if "max_tokens" in df.columns:
        given = pd.to_numeric(df["max_tokens"], errors="raise")
        fallback = np.where(given.isna().to_numpy(), fallback, given.fillna(0).to_numpy(np.int64))
    return np.maximum(1, fallback).astype(np.int64)


def _check_rows(ids: list[str], prompts: np.ndarray, arrivals: np.ndarray) -> None:
    """Reject impossible rows up front, naming the first bad request (Requests are built later)."""
    bad = np.flatnonzero(prompts < 1)
    if len(bad):
        raise ValueError(
            f"request {ids[bad[0]]}: prompt_len must be >= 1 (workload row {bad[0]}, "
            f"column prompt_tokens = {prompts[bad[0]]})"
        )
    late = np.flatnonzero(~(np.abs(arrivals) <= MAX_ARRIVAL_S))
    if len(late):
        i = int(late[0])
        raise field_error(
            "arrival_time",
            f"request {ids[i]} arrives beyond the {MAX_ARRIVAL_S:.3g} s that simulated time resolves "
            "to a microsecond (a trace in ns or ms read as seconds? a --rate far too low?)",
            float(arrivals[i]),
        )


def prepare(df: pd.DataFrame, cfg: RunConfig, max_model_len: int) -> PreparedWorkload:
    """Columns: max_tokens from the row, else a cap; too-long prompts are rejected."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"workload is missing required column(s) {missing}")
    ids = [str(x) for x in df["request_id"].tolist()]
    if len(set(ids)) != len(ids):
        raise ValueError("workload column request_id has duplicate values")
    arrivals = df["arrival_time"].to_numpy(dtype=float)
    prompts = df["prompt_tokens"].to_numpy(dtype=np.int64)
    outputs = df["output_tokens"].to_numpy(dtype=np.int64)
    _check_rows(ids, prompts, arrivals)
    room = max_model_len - prompts
    prio = np.array(_column(df, "priority", 0), dtype=np.int64)
    cols = WorkloadColumns(ids, arrivals, prompts, _max_tokens(df, cfg, room, outputs), prio)
    lora = _column(df, "lora_id", None)
    out = PreparedWorkload(
        cols, outputs, _structured(df, cfg, ids), lora, _hashes(df, cfg.block_size), cfg.num_spec_tokens
    )
    out.rejected = {ids[i] for i in np.flatnonzero(room < 1)}  # vLLM refuses prompts with no room
    _fault_plan(out, cfg, ids, arrivals.tolist())
    return out


def _structured(df: pd.DataFrame, cfg: RunConfig, ids: list[str]) -> np.ndarray:
    """The trace's structured_output column, plus a seeded structured_fraction of the requests."""
    structured = np.array(_column(df, "structured_output", False), dtype=bool)
    if cfg.structured_fraction:
        frac = cfg.structured_fraction
        structured |= np.array([uniform(request_key(cfg.seed, rid) ^ 0x57) < frac for rid in ids], dtype=bool)
    return structured


def _fault_plan(out: PreparedWorkload, cfg: RunConfig, ids: list[str], arrivals: list[float]) -> None:
    """Explicit and seeded aborts and KV-load failures; unknown ids are errors."""
    known = set(ids)
    for name, named in (("abort_times", cfg.abort_times), ("kv_load_failures", cfg.kv_load_failures)):
        for rid in named:
            if rid not in known:
                raise field_error(name, "no request with this id in the workload", rid)
    out.aborts = [(float(t), rid) for rid, t in cfg.abort_times.items()]
    out.kv_load_failures = set(cfg.kv_load_failures)
    if not (cfg.abort_fraction or cfg.kv_load_failure_fraction):
        return  # no seeded draws to make
    for i, rid in enumerate(ids):
        key = request_key(cfg.seed, rid)
        if cfg.abort_fraction and rid not in cfg.abort_times and uniform(key ^ 0xAB) < cfg.abort_fraction:
            out.aborts.append((arrivals[i] + cfg.abort_window_s * uniform(key ^ 0xCD), rid))
        if cfg.kv_load_failure_fraction and uniform(key ^ 0xEF) < cfg.kv_load_failure_fraction:
            out.kv_load_failures.add(rid)
