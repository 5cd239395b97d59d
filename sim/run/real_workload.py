"""The workload of a run on the real backend: small unless asked otherwise, and shaped to fit the model.

A real run replays arrivals in wall-clock time on a real model (often a CPU), so the shipped traces'
thousands of requests would take hours. Unless the config names `max_requests` or the caller asks for
the full trace, a real run takes the first DEFAULT_REAL_REQUESTS requests; prompts longer than the
model's context allows are clipped so that every request runs (the simulator would reject them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from schedsim.run.config import RunConfig
from schedsim.run.workload import load, select

DEFAULT_REAL_REQUESTS = 32


@dataclass
class RealWorkload:
    """The rows to replay and the one line that says what they are."""

    frame: pd.DataFrame
    description: str
    num_clipped: int


def clip_prompts(df: pd.DataFrame, max_model_len: int) -> tuple[pd.DataFrame, int]:
    """Prompts shortened so prompt + output fits max_model_len (outputs keep at most half of it)."""
    prompts = df["prompt_tokens"].to_numpy(dtype=np.int64)
    outputs = np.minimum(df["output_tokens"].to_numpy(dtype=np.int64), max_model_len // 2)
    room = np.maximum(max_model_len - outputs, 1)
    clipped = prompts > room
    if not clipped.any():
        return df, 0
    df = df.copy()
    df["prompt_tokens"] = np.minimum(prompts, room)
    return df, int(clipped.sum())


def real_workload(
    cfg: RunConfig, workload: pd.DataFrame | None, max_model_len: int, full_trace: bool = False
) -> RealWorkload:
    """The configured workload, cut to DEFAULT_REAL_REQUESTS rows unless asked, prompts clipped."""
    df = load(cfg) if workload is None else select(workload, cfg)
    source = cfg.trace if workload is None else str(workload.attrs.get("source", "the given workload"))
    total = len(df)
    cut = cfg.max_requests is None and not full_trace and total > DEFAULT_REAL_REQUESTS
    if cut:
        df = df.iloc[:DEFAULT_REAL_REQUESTS]
    df, clipped = clip_prompts(df, max_model_len)
    what = (
        f"the first {len(df)} of {total} requests of {source} (--full-trace or --max-requests for more)"
        if cut
        else f"{len(df)} requests of {source}"
    )
    if clipped:
        what += f"; {clipped} prompt(s) clipped to fit the model's {max_model_len}-token context"
    return RealWorkload(df, f"real-backend workload: {what}", clipped)
