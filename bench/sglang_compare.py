"""Compare sglang-overlap with the baselines (and vllm-async) on one workload; prints figures.

Usage: python bench/sglang_compare.py [--max-requests N] [--rate R] [--blocks B]
Two settings: the shipped Azure conversation trace at the given rate on Llama-3.1-8B / H100
(the default pool), and the same with a small KV pool (--blocks) to provoke retraction and
preemption. Also times the policies' own CPU hot path (schedule + update per step).
"""

from __future__ import annotations

import argparse
import time
from collections import deque

from schedsim import RunConfig, simulate
from schedsim.policies import Request, StepResult, make_policy

POLICIES = ["vllm-async", "sglang-overlap", "sarathi", "orca", "static"]
COLS = [
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "output_throughput",
    "num_preemptions",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "num_steps",
]


def one(policy: str, args: argparse.Namespace, blocks: int | None) -> dict:
    """One simulated run; the summary row plus the simulator's wall time."""
    cfg = RunConfig(
        policy=policy,
        max_requests=args.max_requests,
        rate=args.rate,
        num_gpu_blocks=blocks,
        max_tokens_source="cap",
        max_tokens_cap=args.max_tokens_cap,
        max_model_len=args.max_model_len,
    )
    t0 = time.perf_counter()
    res = simulate(cfg)
    row = {k: res.summary[k] for k in COLS}
    row["sim_wall_s"] = time.perf_counter() - t0
    row["us_per_step"] = 1e6 * row["sim_wall_s"] / max(row["num_steps"], 1)
    return row


def hot_path(policy: str, n: int = 2000, batch: int = 256) -> tuple[float, int]:
    """Policy-only CPU cost: mean µs of schedule() + update_from_output() per step, fake model."""
    pol = make_policy(
        policy,
        num_gpu_blocks=20000,
        max_num_seqs=batch,
        max_model_len=4096,
        max_num_batched_tokens=2048 if policy not in ("orca", "static") else 4096,
    )
    for i in range(n):
        pol.add_request(Request(f"r{i}", 0.0, 200 + (i * 37) % 600, 100 + (i * 53) % 300))
    queue: deque = deque()
    steps, spent = 0, 0.0
    while pol.has_requests() or queue:
        t0 = time.perf_counter()
        if pol.has_requests():
            plan = pol.schedule()
            spent += time.perf_counter() - t0
            sampled = {
                rid: [7] for rid in plan.num_scheduled_tokens if not pol.requests[rid].is_prefill_chunk
            }
            queue.appendleft((plan, StepResult(plan.step_id, sampled)))
            steps += 1
            if len(queue) < pol.max_concurrent_batches and (not plan.is_empty or pol.has_requests()):
                continue
        plan, res = queue.pop()
        t0 = time.perf_counter()
        pol.update_from_output(plan, res)
        spent += time.perf_counter() - t0
    return 1e6 * spent / steps, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-requests", type=int, default=300)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--blocks", type=int, default=800)
    ap.add_argument("--max-tokens-cap", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=8192)
    args = ap.parse_args()
    print("== policy hot path: 2000 requests, batch 256, fake model (us per step, steps) ==")
    for pol in POLICIES:
        us, steps = hot_path(pol)
        print(f"{pol:16s} {us:10.1f} us/step {steps:8d} steps")
    for label, blocks in (("default KV pool", None), (f"{args.blocks}-block KV pool", args.blocks)):
        print(
            f"\n== azure-conv-2023, {args.max_requests} requests at {args.rate}/s, {label}, "
            f"max_tokens_cap {args.max_tokens_cap} =="
        )
        print(f"{'policy':16s} " + " ".join(f"{c[:14]:>14s}" for c in COLS + ["sim_wall_s", "us_per_step"]))
        for pol in POLICIES:
            row = one(pol, args, blocks)
            print(f"{pol:16s} " + " ".join(f"{row[c]:14.3f}" for c in COLS + ["sim_wall_s", "us_per_step"]))


if __name__ == "__main__":
    main()
