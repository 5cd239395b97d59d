"""Replay the whole Azure conversation trace with vllm-async on Llama-3.1-8B / H100; print speed.

Usage: python bench/bench_default.py [--max-requests N] [--profile OUT.prof] [--policy NAME]
                                     [--no-fast-forward]
Prints wall seconds, simulated steps and requests per wall second, and peak memory
(the process's max RSS; with --tracemalloc, the peak of Python allocations).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import resource
import time
import tracemalloc

from schedsim import RunConfig, simulate


def main() -> None:
    """Run the default replay once and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--policy", default="vllm-async")
    ap.add_argument(
        "--no-fast-forward",
        action="store_true",
        help="simulate every step (RunConfig.fast_forward=False) to compare",
    )
    ap.add_argument("--profile", metavar="OUT.prof", help="write a cProfile dump (slows the run)")
    ap.add_argument(
        "--tracemalloc", action="store_true", help="also trace Python allocations (slows the run ~2x)"
    )
    args = ap.parse_args()
    cfg = RunConfig(policy=args.policy, max_requests=args.max_requests, fast_forward=not args.no_fast_forward)
    if args.tracemalloc:
        tracemalloc.start()
    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    res = simulate(cfg)
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    s = res.summary
    rss_gib = usage.ru_maxrss / 1024**2
    print(f"machine: {platform.machine()} x{_cpus()} cores, Python {platform.python_version()}")
    core = res.config["compiled_core"]
    print(f"compiled core: {'active' if core['active'] else 'not active (' + core['reason'] + ')'}")
    print(f"config: {cfg.trace} policy={cfg.policy} model={cfg.model} gpu={cfg.gpu} engine={s['engine']}")
    print(
        f"requests: {s['num_requests']} (finished {s['num_finished']}), steps: {s['num_steps']}, "
        f"simulated duration: {s['duration_s']:.1f} s"
    )
    print(
        f"fast-forward: {'on' if cfg.fast_forward else 'off'}, jumped steps: {s['fast_forward_steps']} "
        f"in {s['fast_forward_jumps']} jumps"
    )
    print(
        f"wall: {wall:.1f} s (simulation loop {s['sim_wall_s']:.1f} s); process CPU time: {cpu:.1f} s "
        "(the fairer figure on a shared machine)"
    )
    print(f"steps per wall second: {s['num_steps'] / wall:,.0f}")
    print(f"requests per wall second: {s['num_requests'] / wall:,.0f}")
    print(f"peak RSS: {rss_gib:.2f} GiB")
    if args.tracemalloc:
        print(f"tracemalloc peak: {tracemalloc.get_traced_memory()[1] / 1024**3:.2f} GiB")
    print(
        f"mean TTFT {s['mean_ttft_ms']:.1f} ms, mean TPOT {s['mean_tpot_ms']:.2f} ms, "
        f"GPU idle {s['gpu_idle_fraction']:.3f}, CPU hidden {s['cpu_hidden_fraction']:.3f}"
    )


def _cpus() -> int:
    """Cores available to this process."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    main()
