"""GPU checks for a session that has the lent GPU; one script, a few minutes.

    python bench/gpu_check.py [--quick]

1. the GPU-marked tests (compiled Triton kernels at real shapes, the CUDA executor with streams,
   pinned D2H and on-device placeholder fill) and the kernel tests, compiled for CUDA;
2. the policy-driven validation tests (greedy outputs identical to the dense reference);
3. a timing sweep: step time over prefill/decode shapes for the `small` preset, Triton kernels vs
   the torch references, plus the fitted whole-step model's error on this GPU.
Prints every figure; exits non-zero if a test failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_tests(args: list[str]) -> int:
    """pytest in a subprocess (so a crashed kernel cannot take this script down)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "0"})
    print(f"-> rc={rc} in {time.perf_counter() - t0:.1f}s", flush=True)
    return rc


def sweep(quick: bool) -> None:
    """Step times of the `small` preset in fp16: Triton vs torch ops, and the fitted model's error."""
    import torch
    from schedsim.backend import ExecutorConfig, RealExecutor
    from schedsim.backend.calibrate import CalibrationGrid, measure_steps
    from schedsim.latency.fitted import fit_step_model

    grid = CalibrationGrid(
        prefill_tokens=(0, 128, 512) if quick else (0, 64, 256, 1024, 2048),
        prefill_context=(0, 1024),
        num_decodes=(0, 8, 64) if quick else (0, 1, 16, 64, 256),
        decode_context=(128, 1024) if quick else (128, 2048),
        repeats=5,
    )
    frames = {}
    for ops in ("triton", "torch"):
        ex = RealExecutor.from_config(
            ExecutorConfig(
                model="small", block_size=16, num_blocks=40000, device="cuda", dtype="float16", ops=ops
            )
        )
        print(f"[{ops}] {ex.describe()}; warmup {ex.warmup():.2f}s", flush=True)
        t0 = time.perf_counter()
        frames[ops] = measure_steps(ex, grid)
        print(f"[{ops}] {len(frames[ops])} shapes in {time.perf_counter() - t0:.1f}s", flush=True)
        del ex
        torch.cuda.empty_cache()
    table = frames["triton"].copy()
    table["torch_step_ms"] = frames["torch"].step_time_s * 1e3
    table["triton_step_ms"] = table.pop("step_time_s") * 1e3
    table["speedup"] = table.torch_step_ms / table.triton_step_ms
    cols = [
        "prefill_tokens",
        "prefill_context",
        "decode_count",
        "decode_context",
        "triton_step_ms",
        "torch_step_ms",
        "speedup",
    ]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    fit = fit_step_model(frames["triton"], model="small", gpu=torch.cuda.get_device_name())
    print("fitted whole-step model (triton):", fit["coefficients"])
    fe, cv = fit["fit_error"], fit["cv_error"]
    print(
        f"  in-sample median/p90 {fe['median_rel_err']:.1%}/{fe['p90_rel_err']:.1%}; "
        f"held-out {cv['median_rel_err']:.1%}/{cv['p90_rel_err']:.1%}"
    )
    out = ROOT / "runs" / "gpu_check_steps.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    frames["triton"].to_csv(out, index=False)
    print(f"wrote {out} (feed it to `schedsim calibrate --steps`)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweep grid")
    parser.add_argument("--no-sweep", action="store_true", help="tests only")
    args = parser.parse_args()
    import torch
    import triton

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check", file=sys.stderr)
        return 2
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    rc = run_tests(["tests/backend/test_backend_gpu.py", "tests/backend/test_backend_kernels.py"])
    rc |= run_tests(["tests/backend/test_backend_validation.py", "tests/backend/test_backend_executor.py"])
    if not args.no_sweep:
        sweep(args.quick)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
