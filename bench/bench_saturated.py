"""Simulator cost under saturation: every registered policy on a 128-wide batch that stays full.

Usage: python bench/bench_saturated.py [--policy NAME ...] [--engine auto|sync|async|both]
                                       [--max-requests N] [--profile] [--top 10] [--json]
                                       [--against PYTHON [--repeat K]] [--digest]
                                       [--instructions]

The configuration (the one compared with Vidur): the Azure conversation trace (19,366 requests),
each request's prompt + output cut to 4,096 tokens as Vidur's trace length generator cuts them,
Llama-2-7B on one A100-80GB, `max_num_seqs=128`, `num_gpu_blocks=7425`, a token budget of 4,096
(512-token chunks for sarathi, its chunk size), compiled core when built. Each run is a fresh
child process, so that peak RSS is that run's alone. Prints steps (and how many of them
fast-forward jumped), wall and process CPU seconds of `simulate()`, CPU µs per step, CPU µs per
scheduled request-step (per row of a step's batch), peak RSS and, with --profile, where the time
goes (cProfile's top functions by own time; the profile slows the run). `SCHEDSIM_PURE=1` runs
the children interpreted. On a shared machine wall time follows the load (printed): the per-step
figures use process CPU time, and `--against PYTHON` compares two trees in the same conditions,
running each policy alternately under this interpreter and PYTHON (another checkout's venv),
`--repeat` times, and printing each side's best CPU µs per step and the ratio. `--digest` adds
each run's table digests (bench/table_digests.py's), to check that two trees agree exactly.
`--stretches` adds the lengths of the steady stretches a fast-forward could jump: maximal runs of
steps with the same batch shape (prefill and decode requests, prefill tokens, running requests)
and no finish, preemption or pause, split into pure-decode and mixed (a prefill chunk riding).
`--instructions` runs each child under valgrind's callgrind and counts the instructions executed
inside the compiled core's simulation loop (`SimWorld.run`), a figure that does not move with the
machine's load or speed; with `--profile` it lists the `--top` compiled functions with the most
instructions (inclusive), and with `--against` it compares two trees by one count each. It needs
valgrind and the compiled core, and runs ~50 times slower: use it with `--max-requests`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pandas as pd

MAX_TOKENS = 4096  # prompt + output, Vidur's max_tokens
CHUNKED_BUDGET = {"sarathi": 512}  # policies whose budget is a prefill chunk size
BUDGET = 4096
# the compiled simulation loop, the function callgrind counts inside (--instructions)
LOOP_SYMBOL = "CPyDef_simpy_world___SimWorld___run"
# a line of callgrind_annotate's inclusive listing that names a compiled function
CALLGRIND_ROW = re.compile(r"^\s*(?P<count>[\d,]+)\s+\(\s*(?P<share>[\d.]+)%\)\s+.*CPyDef_(?P<name>\w+)")


def saturated_workload(max_requests: int | None = None) -> pd.DataFrame:
    """The Azure conversation trace with prompt + output cut to 4,096 tokens (Vidur's rule: at
    least one token each, the excess taken from both in proportion, rounded up)."""
    from schedsim.traces import cap_tokens, load_workload

    df = load_workload("azure-conv-2023")
    if max_requests is not None:
        df = df.iloc[:max_requests]
    return cap_tokens(df, MAX_TOKENS)


def saturated_config(policy: str, engine: str = "auto", **kw: Any) -> Any:
    """The RunConfig of the saturated configuration for one policy and engine loop."""
    from schedsim import RunConfig

    return RunConfig(
        policy=policy,
        engine=engine,
        model="llama-2-7b",
        gpu="a100-80gb",
        max_num_seqs=128,
        num_gpu_blocks=7425,
        max_model_len=MAX_TOKENS,
        max_num_batched_tokens=CHUNKED_BUDGET.get(policy, BUDGET),
        **kw,
    )


def run_one(
    policy: str,
    engine: str,
    max_requests: int | None,
    profile: int,
    digest: bool = False,
    stretches: bool = False,
) -> dict:
    """One saturated run in this process; its figures (and the profile's top functions)."""
    from schedsim import accel, simulate

    cfg = saturated_config(policy, engine)
    workload = saturated_workload(max_requests)
    prof = cProfile.Profile(time.process_time) if profile else None  # CPU time: the machine is shared
    w0, c0 = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    res = simulate(cfg, workload=workload)
    if prof is not None:
        prof.disable()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    s, steps = res.summary, res.steps
    n_steps = int(s["num_steps"])
    req_steps = int(steps["num_prefill_reqs"].sum() + steps["num_decode_reqs"].sum())
    out = {
        "policy": policy,
        "engine": s["engine"],
        "requests": int(s["num_requests"]),
        "finished": int(s["num_finished"]),
        "steps": n_steps,
        "request_steps": req_steps,
        "jumped_steps": int(s.get("fast_forward_steps", 0)),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "us_per_step": round(1e6 * cpu / max(n_steps, 1), 1),
        "us_per_request_step": round(1e6 * cpu / max(req_steps, 1), 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3),
        "compiled_core": accel.status().active,
    }
    if prof is not None:
        out["profile"] = _top(prof, profile)
    if digest:
        from table_digests import digest as table_digest  # bench/ is this script's folder

        out["digest"] = table_digest(res)
    if stretches:
        out["stretches"] = stretch_lengths(res.steps)
    return out


def stretch_lengths(steps: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Steady stretches (same batch shape, no finish, preemption or pause) by kind: how many, the
    mean and median length, and the share of all steps inside stretches of >= 4, 8, 16, 32 steps."""
    shape = steps[["num_prefill_reqs", "num_decode_reqs", "num_prefill_tokens", "num_running"]]
    event = (steps["num_finished"] + steps["num_preempted"] + steps["num_paused"]).to_numpy() > 0
    # a new stretch starts where the shape changes or after a step with an event
    changed = (shape != shape.shift()).any(axis=1).to_numpy() | np.roll(event, 1)
    changed[0] = True
    sid = np.cumsum(changed)
    lengths = pd.Series(sid).value_counts(sort=False)
    mixed = pd.Series(steps["num_prefill_reqs"].to_numpy() > 0).groupby(sid).first()
    total = len(steps)
    out: dict[str, dict[str, float]] = {}
    for kind, sel in (("decode", ~mixed), ("mixed", mixed)):
        lens = lengths[sel[sel].index].to_numpy()
        row = {"stretches": int(len(lens)), "steps": int(lens.sum())}
        row["mean"] = round(float(lens.mean()), 2) if len(lens) else 0.0
        row["median"] = float(np.median(lens)) if len(lens) else 0.0
        for at_least in (4, 8, 16, 32):
            row[f"share>={at_least}"] = round(float(lens[lens >= at_least].sum()) / total, 3)
        out[kind] = row
    return out


def _top(prof: cProfile.Profile, n: int) -> list[str]:
    """The profile's n functions with the most own time, one line each."""
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:n]  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.stats.values()) or 1.0  # type: ignore[attr-defined]
    return [
        f"{v[2]:7.2f} s {100 * v[2] / total:5.1f} % {v[1]:>9} calls  {os.path.basename(k[0])}:{k[1]}({k[2]})"
        for k, v in rows
    ]


def _child(
    policy: str,
    engine: str,
    max_requests: int | None,
    profile: int,
    python: str = sys.executable,
    digest: bool = False,
    stretches: bool = False,
    instructions: bool = False,
) -> dict:
    """`run_one` in a fresh interpreter (`python`: another tree's venv), its `profile` top functions
    by cProfile; with `instructions`, under callgrind instead: the loop's instruction count and its
    `profile` top compiled functions."""
    flags = f"{int(digest)}{int(stretches)}"
    cprofile = 0 if instructions else profile
    args = [python, __file__, "--child", policy, engine, str(max_requests or 0), str(cprofile), flags]
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "callgrind.out")
        if instructions:
            args = ["valgrind", "--tool=callgrind", f"--toggle-collect={LOOP_SYMBOL}",
                    f"--callgrind-out-file={out_file}", *args]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode:
            return {"policy": policy, "engine": engine, "error": done.stderr.strip().splitlines()[-1]}
        r = json.loads(done.stdout.strip().splitlines()[-1])
        if instructions:
            if not r["compiled_core"]:
                return {"policy": policy, "engine": engine, "error": "compiled core not active: no loop"}
            r["instructions"] = callgrind_total(out_file)
            r["top_instructions"] = callgrind_top(out_file, profile)
    return r


def callgrind_total(path: str) -> int:
    """The instructions a callgrind output file counted (its `summary:` line)."""
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"{path}: no summary line (did callgrind run?)")


def callgrind_top(path: str, n: int) -> list[str]:
    """The n compiled functions with the most instructions, callees included, one line each (the
    loop and the generator frames that wrap it, at ~100 %, left out)."""
    if n <= 0:
        return []
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True)
    rows = []
    for line in done.stdout.splitlines():
        m = CALLGRIND_ROW.match(line)
        if m is None or float(m["share"]) >= 99.5:
            continue
        count = int(m["count"].replace(",", ""))
        rows.append(f"{count / 1e6:10.1f} M {float(m['share']):6.2f} %  {m['name']}")
    return rows[:n]


def _policies() -> list[str]:
    """Every registered policy, plugins included."""
    from schedsim.policies import list_policies

    return [p.name for p in list_policies()]


def _print(r: dict) -> None:
    """One run's line (and its profile)."""
    if "error" in r:
        print(f"{r['policy']:28} {r['engine']:20} error: {r['error']}", flush=True)
        return
    if "instructions" in r:  # timed under callgrind: only the counts mean anything
        n = r["instructions"]
        print(
            f"{r['policy']:28} {r['engine']:20} {r['steps']:>8,} {r['jumped_steps']:>8,} {n / 1e6:>12,.1f} "
            f"{n / 1e3 / max(r['steps'], 1):>10.1f} {n / 1e3 / max(r['request_steps'], 1):>10.2f}",
            flush=True,
        )
    else:
        print(
            f"{r['policy']:28} {r['engine']:20} {r['steps']:>8,} {r['jumped_steps']:>8,} {r['wall_s']:>8.2f} "
            f"{r['cpu_s']:>8.2f} {r['us_per_step']:>8.1f} {r['us_per_request_step']:>8.2f} "
            f"{r['peak_rss_gib']:>7.2f}",
            flush=True,
        )
    for line in r.get("profile", []) + r.get("top_instructions", []):
        print("      " + line)
    if "digest" in r:
        print("      digest: " + json.dumps(r["digest"], sort_keys=True))
    for kind, row in r.get("stretches", {}).items():
        print(f"      {kind} stretches: " + ", ".join(f"{k} {v}" for k, v in row.items()))


def _columns(instructions: bool) -> str:
    """The figures' column heads: instructions (millions, thousands a step and a request-step), or
    wall and CPU seconds, CPU µs a step and a request-step, and peak RSS."""
    if instructions:
        return f"{'instr. M':>12} {'k/step':>10} {'k/r-st':>10}"
    return f"{'wall s':>8} {'cpu s':>8} {'µs/step':>8} {'µs/r-st':>8} {'RSS GiB':>7}"


def _header() -> None:
    """Date, machine, load and build: the conditions the figures were measured in."""
    from schedsim import accel

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}, machine: {platform.machine()} x{os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average (1, 5, 15 min): {load}"
    )
    print(f"compiled core: {'active' if accel.status().active else accel.status().reason}")


def _compare(args: argparse.Namespace, policies: list[str], engines: tuple[str, ...]) -> None:
    """Each policy alternately under the other tree and this one; best CPU µs per step of each
    (with --instructions: one count of each, in millions)."""
    unit, metric = ("M", "instructions") if args.instructions else ("µs", "us_per_step")
    scale = 1e-6 if args.instructions else 1.0
    repeat = 1 if args.instructions else args.repeat
    print(f"{'policy':28} {'engine':20} {'steps':>8} {'base ' + unit:>10} {'this ' + unit:>10} {'ratio':>6}")
    for policy in policies:
        for engine in engines:
            runs: dict[str, list[dict]] = {"base": [], "this": []}
            for _ in range(repeat):
                n = args.max_requests
                runs["base"].append(
                    _child(policy, engine, n, 0, args.against, instructions=args.instructions)
                )
                runs["this"].append(_child(policy, engine, n, 0, instructions=args.instructions))
            bad = [r for side in runs.values() for r in side if "error" in r]
            if bad:
                _print(bad[0])
                continue
            base = scale * min(r[metric] for r in runs["base"])
            this = scale * min(r[metric] for r in runs["this"])
            steps = {r["steps"] for side in runs.values() for r in side}
            print(
                f"{policy:28} {runs['this'][0]['engine']:20} {'/'.join(map(str, sorted(steps))):>8} "
                f"{base:>10.1f} {this:>10.1f} {this / base:>6.3f}",
                flush=True,
            )


def main() -> None:
    """Run the matrix, one child process per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="policy to run (repeat; default: every registered one)")
    ap.add_argument("--engine", default="auto", choices=("auto", "sync", "async", "both"))
    ap.add_argument("--max-requests", type=int, default=None, help="only the trace's first N requests")
    ap.add_argument("--profile", action="store_true", help="cProfile each run and print its top functions")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="also print every run's figures as JSON lines")
    ap.add_argument("--against", metavar="PYTHON", help="interleave runs with another tree's interpreter")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved pairs per policy with --against")
    ap.add_argument("--digest", action="store_true", help="print each run's table digests")
    ap.add_argument("--stretches", action="store_true", help="print the steady stretches' lengths")
    ap.add_argument(
        "--instructions", action="store_true", help="count the loop's instructions under callgrind instead"
    )
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        policy, engine, n, profile, flags = args.child
        figures = run_one(policy, engine, int(n) or None, int(profile), flags[0] == "1", flags[1] == "1")
        print(json.dumps(figures))
        return
    engines = ("sync", "async") if args.engine == "both" else (args.engine,)
    policies = args.policy or _policies()
    if args.instructions and shutil.which("valgrind") is None:
        sys.exit("bench_saturated.py --instructions: valgrind is not installed (it counts with callgrind)")
    _header()
    if args.against:
        _compare(args, policies, engines)
        return
    print(f"{'policy':28} {'engine':20} {'steps':>8} {'jumped':>8} " + _columns(args.instructions))
    top = args.top if args.profile else 0  # the cProfile's, or callgrind's, top functions
    for policy in policies:
        for engine in engines:
            r = _child(
                policy,
                engine,
                args.max_requests,
                top,
                digest=args.digest,
                stretches=args.stretches,
                instructions=args.instructions,
            )
            _print(r)
            if args.json:
                print(json.dumps(r))


if __name__ == "__main__":
    main()
