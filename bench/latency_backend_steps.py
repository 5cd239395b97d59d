"""Fit the whole-step model to real step timings of the backend (tiny model, this machine's CPU).

Measures a grid of step shapes with schedsim.backend.calibrate.measure_steps (needs torch), writes
the CSV, fits it the way `schedsim calibrate --steps` does and prints in-sample and 5-fold
held-out errors. Run: python bench/latency_backend_steps.py [out.csv]
"""

from __future__ import annotations

import sys
import time

from schedsim.latency.fitted import fit_step_model, read_step_csv


def main(out: str = "runs/backend_steps.csv") -> None:
    from pathlib import Path

    from schedsim.backend import ExecutorConfig, RealExecutor
    from schedsim.backend.calibrate import CalibrationGrid, measure_steps

    # one torch thread: on a shared 2-core machine more threads only add contention noise
    ex = RealExecutor.from_config(
        ExecutorConfig(model="tiny", block_size=16, num_blocks=2048, seed=1, device="cpu", cpu_threads=1)
    )
    grid = CalibrationGrid(
        prefill_tokens=(0, 16, 64, 256),
        prefill_context=(0, 512),
        num_decodes=(0, 1, 8, 32),
        decode_context=(32, 512),
        repeats=3,
    )
    t0 = time.perf_counter()
    steps = measure_steps(ex, grid)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    steps.to_csv(out, index=False)
    cal = fit_step_model(read_step_csv(out), source=out, model="tiny", gpu="cpu", tp=1)
    print(f"measured {len(steps)} step shapes in {time.perf_counter() - t0:.1f} s -> {out}")
    print(f"step time range {steps.step_time_s.min() * 1e3:.2f} .. {steps.step_time_s.max() * 1e3:.2f} ms")
    print("coefficients:", {k: f"{v:.3g}" for k, v in cal["coefficients"].items()})
    print(
        f"in-sample median/p90 rel err {cal['fit_error']['median_rel_err']:.1%} / "
        f"{cal['fit_error']['p90_rel_err']:.1%}"
    )
    print(
        f"5-fold held-out median/p90 rel err {cal['cv_error']['median_rel_err']:.1%} / "
        f"{cal['cv_error']['p90_rel_err']:.1%}"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
