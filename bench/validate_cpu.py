"""`schedsim validate` out of the box on a CPU, on a quiet machine and with a second process busy:
the step error median and the report's own noise verdict. The 10 % bound is asserted here rather than
in the test suite, because a CI machine's load is not under the test's control: a run whose report
says its measurements were too noisy to judge is reported, not failed.

    python bench/validate_cpu.py [--busy] [--out DIR] [-- extra validate flags]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BOUND = 0.10


def busy_process() -> subprocess.Popen[bytes]:
    """A second process spinning on a core for the whole run."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", action="store_true", help="keep a `while True: pass` process running")
    parser.add_argument("--out", default="runs/bench-validate")
    parser.add_argument("extra", nargs="*", help="more `schedsim validate` flags (after --)")
    args = parser.parse_args()
    spinner = busy_process() if args.busy else None
    cmd = [
        sys.executable,
        "-m",
        "schedsim.cli.main",
        "validate",
        "--out",
        args.out,
        "--no-progress",
        *args.extra,
    ]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env={**os.environ}, check=False)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    wall = time.perf_counter() - t0
    if done.returncode:
        return done.returncode
    s = json.loads((Path(args.out) / "validation.json").read_text())["summary"]
    print(
        f"\n{'busy' if args.busy else 'quiet'}: {s['num_steps']} steps in {wall:.0f} s; step error median "
        f"{s['step_median_rel_err']:.1%} (p90 {s['step_p90_rel_err']:.1%}), as measured in the run "
        f"{s['step_in_run_median_rel_err']:.1%}; noise {s['measurement_noise_rel']:.1%}; load "
        f"{os.getloadavg()[0]:.1f}\n{s['noise_verdict']}"
    )
    if s["measurements_too_noisy"]:
        print("not judged: the report says its measurements were too noisy")
        return 0
    if s["step_median_rel_err"] > BOUND:
        print(f"FAIL: step error median above {BOUND:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
