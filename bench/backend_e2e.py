"""End-to-end real-backend replay: a few dozen synthetic requests through vllm / vllm-async on the
real model (CPU: torch path), timed for real into the simulator's tables.

    python bench/backend_e2e.py [--model tiny] [--requests 32] [--rate 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from schedsim.run.config import RunConfig
from schedsim.run.real import run_real


def workload(n: int, rate: float, seed: int = 0) -> pd.DataFrame:
    """Poisson arrivals, prompts 32..512 tokens, outputs 16..64 tokens."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_time": np.cumsum(rng.exponential(1 / rate, n)),
            "prompt_tokens": rng.integers(32, 512, n),
            "output_tokens": rng.integers(16, 64, n),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    import schedsim.backend  # noqa: F401  (torch import outside the timed runs)

    rows = []
    for policy, worker in (("vllm", False), ("vllm-async", False), ("vllm-async", True)):
        cfg = RunConfig(
            policy=policy,
            block_size=16,
            num_gpu_blocks=2048,
            max_num_seqs=32,
            max_num_batched_tokens=512,
            max_model_len=2048,
        )
        t0 = time.perf_counter()
        res = run_real(
            cfg,
            workload(args.requests, args.rate),
            {"model": args.model, "cpu_threads": 1, "cpu_worker_thread": worker},
        )
        s = res.summary
        busy = res.timeline.assign(d=res.timeline.end - res.timeline.start).groupby("resource").d.sum()
        rows.append(
            {
                "policy": policy + (" +worker" if worker else ""),
                "wall_s": time.perf_counter() - t0,
                "run_s": s["duration_s"],
                "steps": len(res.steps),
                "out_tok_per_s": s["output_throughput"],
                "median_ttft_ms": s["median_ttft_ms"],
                "median_tpot_ms": s["median_tpot_ms"],
                "gpu_busy_s": busy.get("gpu", 0.0),
                "cpu_busy_s": busy.get("cpu", 0.0),
                "output_hash_sum": int(res.requests.output_hash.sum()),
            }
        )
    print(res.summary["backend_description"])
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
