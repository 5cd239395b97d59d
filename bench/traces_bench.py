"""Workload loading/generation speed and peak memory; prints a Markdown table.

Each case runs in a fresh subprocess so that peak RSS is its own: "peak RSS" is the process's
maximum resident set (timed runs) minus that of a process that only imports schedsim.traces;
"tracemalloc" is the peak of Python/numpy allocations in one extra, untimed run (Arrow string
buffers are not traced). Times are the best of `--repeat` runs.
Usage: python bench/traces_bench.py [--rows-2024 N]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import textwrap

CASES = {
    "load azure-conv-2023 (19,366 rows)": "T.load_workload('azure-conv-2023')",
    "generate 1,000,000 requests (Poisson, lognormal lengths)": (
        "T.generate_workload(T.WorkloadSpec(arrival=T.ArrivalSpec(rate=100.0), "
        "num_requests=1_000_000, seed=0))"
    ),
    "load mooncake-synthetic + block_hashes_at(16)": (
        "T.block_hashes_at(T.load_workload('mooncake-synthetic'), 16)"
    ),
    "generate 20,000 multi-turn session requests (with hashes)": (
        "T.generate_workload(T.WorkloadSpec(classes=[T.ClassSpec('chat', turns=T.LengthSpec("
        "'uniform', low=1, high=8), think_time_s=30, system_prompt_tokens=500, "
        "system_prompts=8)], num_requests=20_000, seed=0))"
    ),
}

CHILD = textwrap.dedent("""
    import json, resource, sys, time, tracemalloc
    import schedsim.traces as T
    stmt = sys.argv[1]
    times = []
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        out = eval(stmt)
        times.append(time.perf_counter() - t0)
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_py = 0
    if sys.argv[3] == "1":
        tracemalloc.start()
        out = eval(stmt)
        peak_py = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"best_s": min(times), "maxrss_mib": peak, "tracemalloc_mib": peak_py / 2**20}))
""")


def run_case(stmt: str, repeat: int, traced: bool = True) -> dict:
    """One case in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, stmt, str(repeat), "1" if traced else "0"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_azure_2024_like(path: str, rows: int) -> None:
    """A synthetic file in the 2024 week-long layout (tz-aware timestamps)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    t = pd.Timestamp("2024-05-10", tz="UTC") + pd.to_timedelta(
        np.cumsum(rng.exponential(0.03, rows)), unit="s"
    )
    df = pd.DataFrame(
        {
            "TIMESTAMP": t.strftime("%Y-%m-%d %H:%M:%S.%f+00:00"),
            "ContextTokens": rng.integers(1, 8000, rows),
            "GeneratedTokens": rng.integers(1, 800, rows),
        }
    )
    df.to_csv(path, index=False)


def main() -> None:
    """Run every case and print the table the docs quote."""
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--rows-2024",
        type=int,
        default=1_000_000,
        help="rows of the synthetic 2024-layout file to stream (0 to skip)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cases = dict(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        if args.rows_2024:
            path = f"{tmp}/azure2024_like.csv"
            write_azure_2024_like(path, args.rows_2024)
            cases[f"stream {args.rows_2024:,}-row Azure-2024-layout CSV"] = f"T.load_workload({path!r})"
            cases["head 1,000 of that file (lazy)"] = f"T.load_workload({path!r}, head=1000)"
        print(
            f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
        )
        base = run_case("None", 1, traced=False)["maxrss_mib"]
        print(f"baseline: importing schedsim.traces peaks at {base:.0f} MiB RSS")
        print("| case | best of runs (s) | peak RSS over baseline (MiB) | tracemalloc peak (MiB) |")
        print("|---|---:|---:|---:|", flush=True)
        for name, stmt in cases.items():
            r = run_case(stmt, args.repeat)
            print(
                f"| {name} | {r['best_s']:.3f} | {r['maxrss_mib'] - base:.0f} | {r['tracemalloc_mib']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
