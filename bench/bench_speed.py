"""Simulator speed: wall and CPU seconds, steps per second and peak memory, one child process per run.

Usage: python bench/bench_speed.py [--max-requests N] [--generated N] [--no-default] [--policy NAME]
                                   [--ff-only on|off]

Runs the default replay (the whole Azure conversation trace, vllm-async, Llama-3.1-8B / H100)
and, with --generated N, a generated N-request workload (`gen:` spec of schedsim.traces), each in
a fresh child process so that peak RSS belongs to that run alone. Fast-forward on and off is run
where RunConfig has a `fast_forward` switch; otherwise only step-by-step simulation is measured.
CPU time is the fairer figure on a shared machine (wall time includes waiting for a core).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

GEN_SPEC = (
    "gen:process=poisson,rate={rate},requests={n},prompt_mean=512,prompt_cv=1,"
    "output_mean=192,output_cv=1,seed=0"
)


def run_one(trace: str, policy: str, max_requests: int | None, fast_forward: bool | None) -> dict:
    """One simulation in this process; returns its figures."""
    from schedsim import RunConfig, simulate

    kw: dict = {} if fast_forward is None else {"fast_forward": fast_forward}
    cfg = RunConfig(policy=policy, trace=trace, max_requests=max_requests, **kw)
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cfg)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    s = res.summary
    return {
        "trace": trace[:48],
        "fast_forward": fast_forward,
        "requests": int(s["num_requests"]),
        "finished": int(s["num_finished"]),
        "steps": int(s["num_steps"]),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "steps_per_cpu_s": round(s["num_steps"] / cpu),
        "steps_per_wall_s": round(s["num_steps"] / wall),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3),
        "mean_ttft_ms": round(float(s["mean_ttft_ms"]), 3),
    }


def _child(trace: str, policy: str, max_requests: int | None, ff: bool | None) -> dict:
    """Run `run_one` in a fresh interpreter (peak memory of that run only)."""
    args = [
        sys.executable,
        __file__,
        "--child",
        trace,
        "--policy",
        policy,
        "--ff",
        "none" if ff is None else str(int(ff)),
    ]
    if max_requests is not None:
        args += ["--max-requests", str(max_requests)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _ff_modes() -> list[bool | None]:
    """[False, True] where RunConfig has the fast-forward switch, else [None]."""
    from schedsim import RunConfig

    return [False, True] if "fast_forward" in RunConfig.__dataclass_fields__ else [None]


def main() -> None:
    """Parse the options, run each configuration in a child, print one line per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-requests", type=int, default=None, help="default run: first N requests")
    ap.add_argument("--generated", type=int, default=0, help="also run a generated N-request workload")
    ap.add_argument("--gen-rate", type=float, default=20.0, help="arrival rate of the generated workload")
    ap.add_argument("--no-default", action="store_true", help="skip the default (Azure) run")
    ap.add_argument("--policy", default="vllm-async")
    ap.add_argument("--ff-only", choices=("on", "off"), help="run fast-forward on (or off) only")
    ap.add_argument("--child", metavar="TRACE", help=argparse.SUPPRESS)
    ap.add_argument("--ff", default="none", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        ff = None if args.ff == "none" else bool(int(args.ff))
        print(json.dumps(run_one(args.child, args.policy, args.max_requests, ff)))
        return
    print(
        f"machine: {platform.machine()} x{len(os.sched_getaffinity(0))} cores, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at start"
    )
    runs = [] if args.no_default else [("azure-conv-2023", args.max_requests)]
    if args.generated:
        runs.append((GEN_SPEC.format(rate=args.gen_rate, n=args.generated), None))
    for trace, n in runs:
        modes = _ff_modes() if args.ff_only is None else [args.ff_only == "on"]
        for ff in modes:
            print(json.dumps(_child(trace, args.policy, n, ff)), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
