"""Measured latencies, shipped and the user's own, as the GPU steps each one timed.

One table, one row per measurement (times in ms): source, model, gpu, tp, engine_profile, metric,
batch, input_len, output_len, value, plus the step shape for metric "step". Metrics:
- ttft: the prefill of a static batch of `batch` prompts of `input_len` tokens;
- tpot: the mean decode step of `batch` requests whose context grows from input_len to
  input_len + output_len - 2;
- e2e: the whole static batch, prefill then output_len - 1 decode steps (a "request" row);
- step: one step of the given shape (num_prefills chunks of prefill_tokens over prefill_context
  cached tokens, decode_batch decodes of decode_context context).
`row_steps` turns a row into those steps; `predict` times them with any per-step function.
The shipped sources, their provenance and licences: data/measurements/PROVENANCE.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .base import StepShape
from .engines import ENGINE_PROFILES
from .memory import kv_pool_blocks
from .specs import get_gpu_spec, get_model_spec

SOURCES = ("splitwise", "argonne", "nvidia", "lmdeploy", "vllm_ci", "lambda")
METRICS = ("ttft", "tpot", "e2e", "step")
PHASE = {"ttft": "prefill", "tpot": "decode", "e2e": "request", "step": "step"}
COLUMNS = (
    "source",
    "model",
    "gpu",
    "tp",
    "engine_profile",
    "metric",
    "batch",
    "input_len",
    "output_len",
    "value",
    "max_num_batched_tokens",
    "num_prefills",
    "prefill_tokens",
    "prefill_context",
    "decode_batch",
    "decode_context",
)
DECODE_SAMPLES = 12  # decode steps timed per row (step time is linear in the context between them)


@dataclass(frozen=True)
class MeasuredStep:
    """One step a measurement contains, and how many of the measured steps it stands for."""

    phase: str  # prefill or decode
    shape: StepShape
    weight: float
    tokens: int
    reqs: int


def shipped_sources(names: tuple[str, ...] = SOURCES) -> pd.DataFrame:
    """The shipped measurements usable for evaluation (quality 'ok'), one row each."""
    folder = resources.files("schedsim.latency").joinpath("data", "measurements")
    frames = []
    for name in names:
        df = pd.read_csv(str(folder.joinpath(f"{name}.csv")), dtype={"engine_version": str})
        frames.append(df[df.quality == "ok"])
    df = pd.concat(frames, ignore_index=True)
    df["gpu"] = [get_gpu_spec(g).name for g in df.gpu]
    return _complete(df)


def _complete(df: pd.DataFrame) -> pd.DataFrame:
    """Every COLUMNS column present, value in ms, phase added."""
    df = df.copy()
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    df["phase"] = df.metric.map(PHASE)
    return df.reset_index(drop=True)


def kv_fits(row: Any) -> bool:
    """Whether a static batch's final KV cache fits the engine's pool (at 0.9 utilisation); if not,
    the engine preempted or queued requests, which a static expansion cannot see."""
    if row.metric == "step":
        return True
    try:
        blocks = kv_pool_blocks(get_model_spec(row.model), get_gpu_spec(row.gpu), int(row.tp), 16)
    except ValueError:
        return False
    return int(row.batch) * (int(row.input_len) + int(row.output_len)) <= blocks * 16


def prefill_groups(row: Any) -> list[int]:
    """Prompts per prefill step: all at once, or (vLLM V0 without chunked prefill, the Argonne
    runs) as many whole prompts as fit max_num_batched_tokens = max(max_model_len, 2048)."""
    b, i = int(row.batch), int(row.input_len)
    budget = row.max_num_batched_tokens
    if (
        (budget is None or budget != budget)
        and row.source == "argonne"
        and row.engine_profile == "vllm-v0-graph"
    ):
        budget = max(get_model_spec(row.model).max_position_embeddings, 2048)
    per = b if budget is None or budget != budget else max(1, min(b, int(budget) // max(i, 1)))
    groups, left = [], b
    while left > 0:
        groups.append(min(per, left))
        left -= per
    return groups


def row_steps(row: Any) -> list[MeasuredStep]:
    """The steps one measurement timed, weighted so that their weighted sum is the measured value."""
    if row.metric == "step":
        return [_step_row(row)]
    b, i, o = int(row.batch), int(row.input_len), int(row.output_len)
    out: list[MeasuredStep] = []
    if row.metric in ("ttft", "e2e"):
        for n in prefill_groups(row):
            out.append(MeasuredStep("prefill", StepShape(prefills=[(i, 0)] * n), 1.0, n * i, n))
    if row.metric in ("tpot", "e2e") and o > 1:
        nd = o - 1
        ks = np.unique(np.linspace(1, nd, min(DECODE_SAMPLES, nd)).round().astype(int))
        w = nd / len(ks) if row.metric == "e2e" else 1.0 / len(ks)
        for k in ks:
            out.append(MeasuredStep("decode", StepShape(decodes=[(i + int(k) - 1, 0)] * b), w, b, b))
    return out


def _step_row(row: Any) -> MeasuredStep:
    n_pre = int(row.num_prefills) if row.num_prefills == row.num_prefills else 0
    chunk = int(row.prefill_tokens) if row.prefill_tokens == row.prefill_tokens else 0
    if chunk and not n_pre:
        n_pre = 1
    ctx = int(row.prefill_context) if row.prefill_context == row.prefill_context else 0
    nd = int(row.decode_batch) if row.decode_batch == row.decode_batch else 0
    dctx = int(row.decode_context) if row.decode_context == row.decode_context else 0
    shape = StepShape(prefills=[(chunk, ctx)] * n_pre if chunk else [], decodes=[(dctx, 0)] * nd)
    return MeasuredStep("prefill" if n_pre else "decode", shape, 1.0, n_pre * chunk + nd, n_pre + nd)


def predict(row: Any, step_time: Callable[[MeasuredStep], float]) -> float:
    """The row's predicted value in seconds from a per-step time function."""
    return sum(s.weight * step_time(s) for s in row_steps(row))


# ---- the user's own measurements ----------------------------------------------------------------
_STEP_COLS = ("num_prefills", "prefill_tokens", "prefill_context", "decode_batch", "decode_context")


def read_measurements(
    path: str | Path,
    model: str,
    gpu: str,
    tp: int,
    engine: str,
    batch_size: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
) -> pd.DataFrame:
    """A user's measurements as rows of the table above: a CSV of step shapes -> step time, a CSV of
    static batches (batch, input_len, output_len -> latency, ttft, tpot), vLLM's benchmark_latency
    JSON (with the batch it ran), or vLLM's benchmark_serving JSON of a max_concurrency=1 run."""
    path = Path(path)
    if engine not in ENGINE_PROFILES:
        raise ValueError(f"unknown engine {engine!r}; known {sorted(ENGINE_PROFILES)}")
    if path.suffix == ".json":
        rows = _json_rows(path, batch_size, input_len, output_len)
    else:
        rows = _csv_rows(path)
    if not rows:
        raise ValueError(f"{path}: no measurements found")
    df = pd.DataFrame(rows)
    df["source"], df["model"], df["gpu"], df["tp"], df["engine_profile"] = (
        "user",
        get_model_spec(model).name,
        get_gpu_spec(gpu).name,
        int(tp),
        engine,
    )
    return _complete(df)


def _number(raw: Any, path: Path, line: int, col: str, positive: bool = False) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if value != value or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{path}:{line}: field {col!r} must be a number {'> 0' if positive else '>= 0'}, got {raw!r}"
        )
    return value


def _csv_rows(path: Path) -> list[dict[str, Any]]:
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: cannot read CSV: {exc}") from exc
    cols = set(df.columns)
    rows: list[dict[str, Any]] = []
    for i, rec in enumerate(df.to_dict("records")):
        line = i + 2
        if "step_time_ms" in cols or "step_time_s" in cols:
            key = "step_time_ms" if "step_time_ms" in cols else "step_time_s"
            ms = _number(rec[key], path, line, key, True) * (1.0 if key.endswith("ms") else 1e3)
            row: dict[str, Any] = {"metric": "step", "value": ms}
            for col in _STEP_COLS:
                row[col] = _number(rec.get(col, 0) if col in cols else 0, path, line, col)
            if not row["prefill_tokens"] and not row["decode_batch"]:
                raise ValueError(f"{path}:{line}: a step needs prefill_tokens or decode_batch > 0")
            rows.append(row)
            continue
        batch_col = "batch_size" if "batch_size" in cols else "batch"
        for need in (batch_col, "input_len", "output_len"):
            if need not in cols:
                raise ValueError(
                    f"{path}: missing column {need!r} (or step_time_ms with step-shape "
                    f"columns {list(_STEP_COLS)})"
                )
        shape: dict[str, float] = {
            "batch": int(_number(rec[batch_col], path, line, batch_col, True)),
            "input_len": int(_number(rec["input_len"], path, line, "input_len", True)),
            "output_len": int(_number(rec["output_len"], path, line, "output_len", True)),
        }
        budget = rec.get("max_num_batched_tokens")
        if budget is not None and budget == budget:
            shape["max_num_batched_tokens"] = _number(
                rec["max_num_batched_tokens"], path, line, "max_num_batched_tokens", True
            )
        found = False
        for col, metric, factor in (
            ("latency_ms", "e2e", 1.0),
            ("latency_s", "e2e", 1e3),
            ("avg_latency", "e2e", 1e3),
            ("ttft_ms", "ttft", 1.0),
            ("tpot_ms", "tpot", 1.0),
        ):
            if col in cols and rec[col] == rec[col]:
                rows.append(
                    {**shape, "metric": metric, "value": _number(rec[col], path, line, col, True) * factor}
                )
                found = True
        if not found:
            raise ValueError(
                f"{path}:{line}: no measured value (latency_ms, latency_s, avg_latency, ttft_ms or tpot_ms)"
            )
    return rows


def _json_rows(
    path: Path, batch_size: int | None, input_len: int | None, output_len: int | None
) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read JSON: {exc}") from exc
    if "avg_latency" in data:  # benchmark_latency: one static batch, its shape from the command line
        if not (batch_size and input_len and output_len):
            raise ValueError(
                f"{path}: a benchmark_latency result needs --batch-size, --input-len and "
                f"--output-len (the values it ran with)"
            )
        return [
            {
                "metric": "e2e",
                "batch": batch_size,
                "input_len": input_len,
                "output_len": output_len,
                "value": float(data["avg_latency"]) * 1e3,
            }
        ]
    if "itls" in data and "input_lens" in data:  # benchmark_serving --save-result --save-detailed
        if data.get("max_concurrency") != 1:
            raise ValueError(
                f"{path}: a benchmark_serving result is usable only from a "
                f"--max-concurrency 1 run (each request alone); this one has "
                f"max_concurrency={data.get('max_concurrency')!r}"
            )
        rows = []
        for n_in, n_out, itls in zip(data["input_lens"], data["output_lens"], data["itls"], strict=False):
            if n_out >= 2 and len(itls) == n_out - 1:  # one token per chunk: each ITL is one step
                rows.append(
                    {
                        "metric": "tpot",
                        "batch": 1,
                        "input_len": int(n_in),
                        "output_len": int(n_out),
                        "value": float(np.mean(itls)) * 1e3,
                    }
                )
        return rows
    raise ValueError(
        f"{path}: not a vLLM benchmark_latency or benchmark_serving result (no 'avg_latency' or 'itls')"
    )
