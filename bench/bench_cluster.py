"""Scale of the cluster world: one replica at the trace's rate against N replicas at N times it.

Usage: python bench/bench_cluster.py [--replicas 16] [--max-requests N] [--router round-robin]
                                     [--no-fast-forward] [--pd P:D] [--interconnect ib-400g]
Each configuration runs in a fresh process (peak RSS is per process). With N replicas at N times
the rate every replica sees about the single replica's load, so the simulated work is about the
same: the figure of merit is the wall time and memory of the fleet against the single run.
With `--pd P:D` the fleet is P prefill and D decode replicas (P + D replicas at P + D times the
rate) and its line adds the KV transfers: count, bytes, mean and p99 transfer time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from schedsim import RunConfig, simulate
from schedsim.run.workload import load


def one(
    replicas: int,
    rate_scale: float,
    max_requests: int | None,
    router: str,
    fast_forward: bool,
    pd: str | None = None,
    interconnect: str = "ib-400g",
) -> dict:
    """Run one configuration in this process; its figures (a fleet of more than one replica is
    split into prefill and decode pools with `pd`)."""
    df = load(RunConfig(max_requests=max_requests))  # the trace's own mean rate, to scale
    span = float(df["arrival_time"].max() - df["arrival_time"].min())
    rate = rate_scale * (len(df) - 1) / span if span > 0 else None
    split = {"pd": pd, "interconnect": interconnect} if pd is not None and replicas > 1 else {}
    cfg = RunConfig(
        max_requests=max_requests,
        rate=rate,
        replicas=replicas,
        router=router,
        fast_forward=fast_forward,
        **split,
    )
    t0 = time.perf_counter()
    res = simulate(cfg)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "replicas": replicas,
        "rate": rate,
        "requests": int(res.summary["num_requests"]),
        "steps": int(res.summary["num_steps"]),
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_gib": usage.ru_maxrss / 2**20,
        "mean_ttft_ms": res.summary["mean_ttft_ms"],
        "fast_forward_steps": int(res.summary.get("fast_forward_steps", 0)),
        **{
            key: res.summary[key]
            for key in ("num_kv_transfers", "kv_bytes_transferred", "mean_kv_transfer_s", "p99_kv_transfer_s")
            if key in res.summary
        },
    }


def main() -> None:
    """Both configurations, each in a fresh process; one JSON line each, then the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--router", default="round-robin")
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--pd", default=None, metavar="P:D", help="split the fleet into prefill and decode pools")
    ap.add_argument("--interconnect", default="ib-400g")
    ap.add_argument(
        "--child", nargs=2, type=float, metavar=("REPLICAS", "RATE_SCALE"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    ff = not args.no_fast_forward
    if args.child:
        n, scale = int(args.child[0]), args.child[1]
        print(json.dumps(one(n, scale, args.max_requests, args.router, ff, args.pd, args.interconnect)))
        return
    rows = []
    fleet = sum(int(x) for x in args.pd.split(":")) if args.pd else args.replicas
    for n in (1, fleet):
        cmd = [sys.executable, __file__, "--child", str(n), str(n), "--router", args.router]
        if args.pd:
            cmd += ["--pd", args.pd, "--interconnect", args.interconnect]
        if args.max_requests:
            cmd += ["--max-requests", str(args.max_requests)]
        if not ff:
            cmd.append("--no-fast-forward")
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(out.stdout.strip().splitlines()[-1])
    one_, many = rows
    n = many["replicas"]
    wall, cpu = many["wall_s"] / one_["wall_s"], many["cpu_s"] / one_["cpu_s"]
    rss = many["peak_rss_gib"] / one_["peak_rss_gib"]
    print(
        f"{n} replicas at {n}x the rate: wall x{wall:.2f}, CPU x{cpu:.2f}, peak RSS x{rss:.2f} of one replica"
    )


if __name__ == "__main__":
    main()
