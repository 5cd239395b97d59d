"""Digests of every table and summary of a fixed matrix of runs: the before/after check of a change
that must not change behaviour (`python bench/table_digests.py > a.json`, change, run again, diff).

Each configuration is run in this process (compiled core if built; SCHEDSIM_PURE=1 for pure
Python); tables are hashed as parquet bytes, the summary as JSON without wall-clock and fast-forward counts.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import time
from typing import Any

from schedsim import RunConfig, simulate

# the summary's wall clock and fast-forward counts: how the run went, not what it computed
DIAGNOSTICS = ("sim_wall_s", "fast_forward_jumps", "fast_forward_steps")
KV_STARVED = {"num_gpu_blocks": 700, "max_model_len": 8192}
MATRIX: dict[str, dict[str, Any]] = {
    "default-whole-trace": {},
    "default-ff-off-3000": {"max_requests": 3000, "fast_forward": False},
    "vllm-kv-starved": {"policy": "vllm", "max_requests": 400, **KV_STARVED},
    "vllm-async-kv-starved": {"policy": "vllm-async", "max_requests": 400, **KV_STARVED},
    "vllm-priority-code": {
        "policy": "vllm",
        "trace": "azure-code-2023",
        "max_requests": 300,
        "scheduling_policy": "priority",
        "num_gpu_blocks": 900,
        "max_model_len": 8192,
    },
    "vllm-drafts": {"policy": "vllm", "max_requests": 300, "num_spec_tokens": 3},
    "vllm-async-aborts-kvfail": {
        "max_requests": 600,
        "abort_fraction": 0.1,
        "kv_load_failure_fraction": 0.05,
        "rate": 6.0,
    },
    "vllm-async-mooncake": {
        "trace": "mooncake-synthetic",
        "max_requests": 200,
        "num_gpu_blocks": 900,
        "max_model_len": 8192,
    },
    "sync-engine-async-policy": {"engine": "sync", "max_requests": 300},
    "trtllm-max-utilization": {"policy": "trtllm:max-utilization", "max_requests": 300, **KV_STARVED},
    "trtllm-guaranteed-no-evict": {"policy": "trtllm:guaranteed-no-evict", "max_requests": 300, **KV_STARVED},
    "trtllm-max-utilization-mooncake": {  # trace-hashed prompt blocks: shared prefixes, partial reuse
        "policy": "trtllm:max-utilization",
        "trace": "mooncake-synthetic",
        "max_requests": 200,
        "num_gpu_blocks": 900,
        "max_model_len": 8192,
    },
    "trtllm-max-requests": {"policy": "trtllm:max-requests", "max_requests": 300},
    "trtllm-static-batch": {"policy": "trtllm:static-batch", "max_requests": 150},
    "sglang-overlap": {"policy": "sglang-overlap", "max_requests": 400, **KV_STARVED},
    "sglang-overlap-mooncake": {
        "policy": "sglang-overlap",
        "trace": "mooncake-synthetic",
        "max_requests": 150,
        "num_gpu_blocks": 1200,
        "max_model_len": 8192,
    },
    "orca": {"policy": "orca", "max_requests": 300},
    "sarathi": {"policy": "sarathi", "max_requests": 300, **KV_STARVED},
    "static": {"policy": "static", "max_requests": 150},
}


def digest(res: Any) -> dict[str, str]:
    """sha256 of each table's parquet bytes and of the summary without DIAGNOSTICS."""
    out: dict[str, str] = {}
    for name in ("requests", "steps", "timeline", "itl"):
        table = getattr(res, name)
        if table is None:
            continue
        buf = io.BytesIO()
        table.to_parquet(buf)
        out[name] = hashlib.sha256(buf.getvalue()).hexdigest()[:16]
    summary = {k: v for k, v in res.summary.items() if k not in DIAGNOSTICS}
    out["summary"] = hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]
    return out


def main() -> None:
    """Print one JSON object: configuration name -> digests."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", help="configurations to run (default: all)")
    args = ap.parse_args()
    out: dict[str, dict[str, str]] = {}
    for name in args.names or MATRIX:
        t0 = time.perf_counter()
        res = simulate(RunConfig(record_itl=True, **MATRIX[name]))
        out[name] = digest(res)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
