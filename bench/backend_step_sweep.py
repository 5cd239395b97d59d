"""Step-time sweep of the real backend on this machine (CPU: torch reference path; GPU: Triton).

    python bench/backend_step_sweep.py [--model tiny] [--ops auto] [--out steps.csv]

Prints the median step time per shape and the fitted whole-step model's in-sample and held-out
error; --out writes the CSV that `schedsim calibrate --steps` reads.
"""

from __future__ import annotations

import argparse
import time

import torch
from schedsim.backend import ExecutorConfig, RealExecutor
from schedsim.backend.calibrate import CalibrationGrid, measure_steps
from schedsim.latency.fitted import fit_step_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="preset or config.json / checkpoint folder")
    parser.add_argument("--ops", default="auto", choices=("auto", "torch", "triton"))
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads")
    parser.add_argument("--out", default=None, help="write the measured steps as CSV")
    args = parser.parse_args()
    ex = RealExecutor.from_config(
        ExecutorConfig(
            model=args.model, block_size=16, num_blocks=1200, ops=args.ops, cpu_threads=args.threads
        )
    )
    print(f"{ex.describe()}; warmup {ex.warmup():.2f}s")
    grid = CalibrationGrid(
        prefill_tokens=(0, 16, 64, 256),
        prefill_context=(0, 256),
        num_decodes=(0, 1, 4, 16),
        decode_context=(32, 256),
        repeats=3,
    )
    t0 = time.perf_counter()
    df = measure_steps(ex, grid)
    print(f"{len(df)} shapes in {time.perf_counter() - t0:.1f}s")
    view = df.assign(step_ms=df.step_time_s * 1e3)
    print(
        view[["prefill_tokens", "prefill_context", "decode_count", "decode_context", "step_ms"]].to_string(
            index=False, float_format=lambda v: f"{v:.2f}"
        )
    )
    fit = fit_step_model(df, model=args.model, gpu=str(ex.device))
    fe, cv = fit["fit_error"], fit["cv_error"]
    print("fitted:", {k: f"{v:.3g}" for k, v in fit["coefficients"].items()})
    print(
        f"fit error median/p90 {fe['median_rel_err']:.1%}/{fe['p90_rel_err']:.1%}; "
        f"held-out {cv['median_rel_err']:.1%}/{cv['p90_rel_err']:.1%}"
    )
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
