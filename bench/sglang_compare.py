"""Compare sglang-overlap with the baselines (and vllm-async) on one workload; prints figures.

Usage: python bench/sglang_compare.py [--max-requests N] [--rate R] [--blocks B]
Two settings: the shipped Azure conversation trace at the given rate on Llama-3.1-8B / H100
(the default pool), and the same with a small KV pool (--blocks) to provoke retraction and
preemption. Also times the policies' own CPU hot path (schedule + update per step).
"""

from __future__ import annotations

import argparse
import time

from schedsim import RunConfig, simulate

POLICIES = ["vllm-async", "sglang-overlap", "sarathi", "orca", "static"]
COLS = ["median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "output_throughput", "num_preemptions",
        "gpu_idle_fraction", "cpu_hidden_fraction", "num_steps"]


def one(policy: str, args: argparse.Namespace, blocks: int | None) -> dict:
    """One simulated run; the summary row plus the simulator's wall time."""
    cfg = RunConfig(policy=policy, max_requests=args.max_requests, rate=args.rate,
                    num_gpu_blocks=blocks, max_tokens_cap=args.max_tokens_cap,
                    max_model_len=args.max_model_len)
    t0 = time.perf_counter()
    res = simulate(cfg)
    row = {k: res.summary[k] for k in COLS}
    row["sim_wall_s"] = time.perf_counter() - t0
    row["us_per_step"] = 1e6 * row["sim_wall_s"] / max(row["num_steps"], 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-requests", type=int, default=300)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--blocks", type=int, default=800)
    ap.add_argument("--max-tokens-cap", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=8192)
    args = ap.parse_args()
    for label, blocks in (("default KV pool", None), (f"{args.blocks}-block KV pool", args.blocks)):
        print(f"\n== azure-conv-2023, {args.max_requests} requests at {args.rate}/s, {label}, "
              f"max_tokens_cap {args.max_tokens_cap} ==")
        print(f"{'policy':16s} " + " ".join(f"{c[:14]:>14s}" for c in COLS + ["sim_wall_s", "us_per_step"]))
        for pol in POLICIES:
            row = one(pol, args, blocks)
            print(f"{pol:16s} " + " ".join(f"{row[c]:14.3f}" for c in COLS + ["sim_wall_s", "us_per_step"]))


if __name__ == "__main__":
    main()
