"""Print TensorRT-LLM policy figures on shipped traces: pauses, recompute, truncation, prefix skips,
queueing and head-of-line blocking per capacity policy, plus the scheduler's own CPU cost per step.
A run that stops where TensorRT-LLM itself fails or wedges reports that in `stops` (cause and step).

Usage: python bench/policies_trtllm_bench.py [--requests N]
"""

from __future__ import annotations

import argparse
import platform
import time

import pandas as pd
from schedsim import simulate
from schedsim.policies import register_policy
from schedsim.policies.trtllm import CapacitySchedulerPolicy, TrtllmConfig, TrtllmFailure, TrtllmPolicy
from schedsim.run.config import RunConfig

CAPTURED: dict[str, TrtllmPolicy] = {}


class _TimedPolicy(TrtllmPolicy):
    """Same policy, recording the wall time of each schedule() (the scheduler's real CPU cost)."""

    schedule_wall_s = 0.0

    def schedule(self):  # type: ignore[override]
        t0 = time.perf_counter()
        plan = super().schedule()
        self.schedule_wall_s += time.perf_counter() - t0
        return plan


def _register_captures() -> None:
    """One bench-only name per capacity policy whose factory keeps the instance for its stats."""
    for cap in CapacitySchedulerPolicy:

        def make(cfg: TrtllmConfig, cap: CapacitySchedulerPolicy = cap) -> TrtllmPolicy:
            CAPTURED[cap.value] = _TimedPolicy(cfg, cap)
            return CAPTURED[cap.value]

        register_policy(f"bench-trtllm:{cap.value}", "bench capture", TrtllmConfig)(make)


def _row(
    trace: str, cap: CapacitySchedulerPolicy, chunking: str, n: int, blocks: int, max_model_len: int
) -> dict:
    """One simulated run and its figures (max_tokens capped at 1024: no-evict reserves to it)."""
    cfg = RunConfig(
        policy=f"bench-trtllm:{cap.value}",
        trace=trace,
        max_requests=n,
        num_gpu_blocks=blocks,
        max_model_len=max_model_len,
        max_tokens_source="cap",
        max_tokens_cap=1024,
        max_num_batched_tokens=2048,
        policy_options={"chunking_policy": chunking},
    )
    try:
        res = simulate(cfg)
    except TrtllmFailure as stop:
        return {
            "trace": trace,
            "capacity": cap.value,
            "chunking": chunking,
            "stops": f"{stop.cause}@{stop.step}",
        }
    pol, s = CAPTURED[cap.value], res.summary
    steps = max(pol.stats.num_steps, 1)
    computed = max(pol.stats.num_computed_tokens, 1)
    return {
        "trace": trace,
        "capacity": cap.value,
        "chunking": chunking,
        "stops": "",
        "pauses": s["num_pauses"],
        "pauses_per_1k_steps": 1000 * s["num_pauses"] / steps,
        "pauses_per_req": s["num_pauses"] / n,
        "recomputed_share": pol.stats.num_recomputed_tokens / computed,
        "truncated": s["truncated_tokens"],
        "prefix_skips": pol.stats.num_prefix_skips,
        "mean_ttft_ms": s["mean_ttft_ms"],
        "mean_queue_ms": s["mean_queueing_ms"],
        "mean_hol_ms": s["mean_hol_blocking_ms"],
        "req_per_s": s["request_throughput"],
        "sched_us_per_step": 1e6 * pol.schedule_wall_s / steps,
        "sim_wall_s": s["sim_wall_s"],
    }


def main() -> None:
    """Run the grid and print one tidy table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    _register_captures()
    rows = []
    # KV-starved pools: 600 blocks = 9,600 tokens for Azure conv; 6,000 = 96,000 for Mooncake.
    for trace, blocks, mml in (("azure-conv-2023", 600, 8192), ("mooncake-synthetic", 6000, 32768)):
        for cap in CapacitySchedulerPolicy:
            for chunking in ("first-come-first-served", "equal-progress"):
                rows.append(_row(trace, cap, chunking, args.requests, blocks, mml))
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(
        f"# {platform.machine()} {platform.python_version()}, {args.requests} requests per run, "
        "llama-3.1-8b on h100-sxm (roofline), block 16, max_num_batched_tokens 2048"
    )
    print(pd.DataFrame(rows).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
