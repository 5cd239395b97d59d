"""Runs the compiled-core test repeats in a pure-Python child process, and their digests."""

from __future__ import annotations

import json

import pandas as pd
from schedsim import RunConfig

COMPARED = [  # policy, engine, trace, pool (None: the default one), requests
    ("vllm-async", "auto", "azure-conv-2023", None, 400),
    ("vllm", "auto", "azure-code-2023", 700, 120),
    ("vllm-async", "auto", "mooncake-synthetic", 900, 120),
    ("trtllm:max-utilization", "auto", "azure-conv-2023", 700, 120),
    ("sglang-overlap", "auto", "azure-conv-2023", 700, 120),
    ("orca", "auto", "azure-conv-2023", None, 150),
]


def run_config(policy: str, engine: str, trace: str, pool: int | None, n: int) -> RunConfig:
    """A small run; a small pool makes it preempt, pause or retract."""
    extra = {"num_gpu_blocks": pool, "max_model_len": 8192} if pool else {}
    return RunConfig(policy=policy, engine=engine, trace=trace, max_requests=n, record_itl=True, **extra)


def digests(res: object) -> dict[str, str]:
    """A digest of every table and of the summary without wall-clock fields."""
    out = {
        name: str(pd.util.hash_pandas_object(getattr(res, name), index=True).sum())
        for name in ("requests", "steps", "timeline", "itl")
    }
    summary = {k: v for k, v in res.summary.items() if k != "sim_wall_s"}
    out["summary"] = json.dumps(summary, sort_keys=True, default=str)
    return out
