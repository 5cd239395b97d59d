"""The stages of bench/gpu_check.py, each run in its own process (so a hung or crashed kernel costs
one stage, not the run):

    python bench/gpu_check_stages.py STAGE --out DIR --work DIR --json FIGURES.json [--quick]

Each stage prints its figures as it goes and writes them as JSON; a raised error fails the stage.
Everything a stage uses is imported here, so the dry run's import of this module catches a renamed
module or helper before a GPU is spent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from gpu_microbench import (
    AttentionShape,
    attention_ms,
    decode_bandwidth,
    gemm_ceiling_tflops,
    hbm_ceiling_gbs,
    prefill_throughput,
)
from schedsim.backend import ExecutorConfig, ModelConfig, RealExecutor, build_model
from schedsim.backend.calibrate import CalibrationGrid, measure_steps
from schedsim.backend.forward_check import TOLERANCE, check_paged_forward
from schedsim.backend.kernels import get_ops
from schedsim.backend.kernels import reference as ref
from schedsim.backend.kernels.attention_tuning import AttentionTuning
from schedsim.backend.kernels.specialization import compiled_variants

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.backend import REAL_SEQS, attention_inputs, max_err  # noqa: E402 - tests/ on the path first

# The schedsim CLI, importable from a link tree or an install alike (no console script needed).
CLI = [sys.executable, "-c", "import sys; from schedsim.cli.main import main; sys.exit(main(sys.argv[1:]))"]


@dataclass(frozen=True)
class StageContext:
    """What every stage gets: mode, where files that come back go, where scratch goes."""

    quick: bool
    out: Path  # files that come back with the run (a few, small)
    work: Path  # scratch (run folders, parquet tables)
    workers: int


def say(*parts: Any) -> None:
    """Print a progress line now (the parent tees it into the log)."""
    print(*parts, flush=True)


def stage_aot(ctx: StageContext) -> dict[str, Any]:
    """Compile every kernel for sm_90 (and sm_80 unless quick) at every shape; no GPU needed."""
    archs = ["90"] if ctx.quick else ["90", "80"]
    report = ctx.out / "aot.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [
        sys.executable,
        "-m",
        "schedsim.backend.kernels.aot",
        "--arch",
        *archs,
        "--workers",
        str(ctx.workers),
        "--json",
        str(report),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    say(proc.stdout.strip() or proc.stderr.strip()[-3000:])
    rows = json.loads(report.read_text()) if report.exists() else []
    if proc.returncode or not rows:
        raise RuntimeError(f"AOT compile failed (rc {proc.returncode}): {proc.stderr.strip()[-500:]}")
    attention = [r for r in rows if "attention" in r["kernel"]]
    return {
        "variants": len(rows),
        "failed_or_spilled": sum(not r["ok"] for r in rows),
        "max_registers": max(r["registers"] for r in rows),
        "max_shared_kb": max(r["shared_bytes"] for r in rows) / 1024,
        "attention": {
            f"{r['kernel']}/{r['dtype']}/sm{r['arch']}/{r['models']}": {
                "regs": r["registers"],
                "smem_kb": round(r["shared_bytes"] / 1024, 1),
                "mma": r["mma"],
            }
            for r in attention
        },
    }


def stage_kernels(ctx: StageContext) -> dict[str, Any]:
    """Compiled kernels against the torch references at real shapes, fp32/bf16/fp16, and the bf16
    forward of Llama-8B-shaped layers against the dense fp32 forward."""
    ops, figures, failed = get_ops("triton"), {}, []
    tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    batches = {
        "mixed": REAL_SEQS,
        "decode": [(300 + 97 * i, 1) for i in range(8)],
        "prefill": [(0, 1000), (512, 300)],
    }
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for dim, kv_heads in ((128, 8), (64, 4)):
            for name, seqs in batches.items():
                q, kc, vc, meta = attention_inputs(seqs, 16, 32, kv_heads, dim, dtype, seed=3)
                q, kc, vc = q.cuda(), kc.cuda(), vc.cuda()
                want = ref.paged_attention_ref(q, kc, vc, meta, dim**-0.5)
                err = max_err(ops.paged_attention(q, kc, vc, meta.to("cuda"), dim**-0.5), want)
                key = f"attention/{name}/d{dim}/{str(dtype)[6:]}"
                figures[key] = err
                if err >= tol[dtype]:
                    failed.append(key)
                say(f"{key:<36} max err {err:.2e} (tolerance {tol[dtype]:.0e})")
    cfg = ModelConfig.from_dict(
        dict(
            vocab_size=4096,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=2 if ctx.quick else 4,
            num_attention_heads=32,
            num_key_value_heads=8,
            rope_theta=500000.0,
            max_position_embeddings=2048,
        ),
        source="llama-8b layers",
    )
    model = build_model(cfg, seed=0, device="cuda", dtype=torch.bfloat16)
    tokens = torch.randint(0, 4096, (600,), generator=torch.Generator().manual_seed(0))
    check = check_paged_forward(model, ops, tokens, [300, 200, 97, 1, 1, 1])
    figures["forward_bf16_llama8b_rel_err"] = check.rel_err
    figures["forward_bf16_llama8b_argmax_agreement"] = check.argmax_agreement
    say(
        f"bf16 Llama-8B layers x{cfg.num_hidden_layers}: logits rel err {check.rel_err:.2e} (tolerance "
        f"{TOLERANCE[torch.bfloat16]:.0e}), greedy agreement {check.argmax_agreement:.0%}"
    )
    if check.rel_err >= TOLERANCE[torch.bfloat16]:
        failed.append("forward_bf16_llama8b")
    if failed:
        raise AssertionError(f"outside tolerance: {failed}")
    return figures


def stage_microbench(ctx: StageContext) -> dict[str, Any]:
    """Ceilings, decode GB/s against HBM, prefill TFLOP/s against flash SDPA, a few tunings."""
    hbm, gemm = hbm_ceiling_gbs(), gemm_ceiling_tflops()
    say(f"HBM copy ceiling {hbm:.0f} GB/s; bf16 GEMM ceiling {gemm:.0f} TFLOP/s")
    out: dict[str, Any] = {"hbm_ceiling_gb_s": hbm, "gemm_bf16_tflops": gemm}
    bf16 = torch.bfloat16
    decodes = {
        "decode_b64_ctx2k": AttentionShape(64, 2047, 1),
        "decode_b1_ctx32k": AttentionShape(1, 32767, 1),
        "decode_b4_ctx8k": AttentionShape(4, 8191, 1),
    }
    for name, shape in decodes.items():
        out[name] = decode_bandwidth(shape, bf16, hbm)
        say(
            f"{name}: {out[name]['gb_s']:.0f} GB/s = {out[name]['fraction_of_hbm']:.0%} of HBM "
            f"({out[name]['ms'] * 1e3:.0f} us)"
        )
    prefills = {"prefill_4x2k": AttentionShape(4, 0, 2048), "prefill_1x8k": AttentionShape(1, 0, 8192)}
    for name, shape in prefills.items():
        out[name] = prefill_throughput(shape, bf16)
        say(
            f"{name}: {out[name]['tflops']:.0f} TFLOP/s, flash SDPA {out[name]['sdpa_tflops']:.0f}: "
            f"{out[name]['time_vs_sdpa']:.2f}x its time"
        )
    if not ctx.quick:
        out["prefill_tunings"] = _prefill_tunings(prefills["prefill_4x2k"])
        out["decode_tunings"] = _decode_tunings(decodes["decode_b64_ctx2k"], hbm)
    return out


def _prefill_tunings(shape: AttentionShape) -> dict[str, float]:
    """TFLOP/s of alternative prefill block shapes (BLOCK_M, BLOCK_N, warps, stages)."""
    out = {}
    for m, n, w, s in ((128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 4), (64, 128, 4, 2)):
        tuning = AttentionTuning(prefill_block_m=m, prefill_block_n=n, prefill_warps=w, prefill_stages=s)
        try:
            ms = attention_ms(shape, torch.bfloat16, tuning)
            out[f"m{m}_n{n}_w{w}_s{s}"] = shape.causal_flops() / ms / 1e9
        except Exception as exc:  # noqa: BLE001 - an out-of-resources variant is a finding, not a failure
            say(f"prefill tuning m{m} n{n} w{w} s{s}: {type(exc).__name__}: {exc}")
            continue
        say(f"prefill tuning m{m} n{n} w{w} s{s}: {out[f'm{m}_n{n}_w{w}_s{s}']:.0f} TFLOP/s")
    return out


def _decode_tunings(shape: AttentionShape, hbm: float) -> dict[str, float]:
    """Fraction of HBM of alternative decode tiles (BLOCK_N, warps, stages)."""
    out = {}
    for n, w, s in ((64, 4, 3), (32, 4, 4), (128, 4, 2), (64, 8, 3), (128, 8, 3)):
        tuning = AttentionTuning(decode_block_n=n, decode_warps=w, decode_stages=s)
        try:
            out[f"n{n}_w{w}_s{s}"] = decode_bandwidth(shape, torch.bfloat16, hbm, tuning)["fraction_of_hbm"]
        except Exception as exc:  # noqa: BLE001 - as above
            say(f"decode tuning n{n} w{w} s{s}: {type(exc).__name__}: {exc}")
            continue
        say(f"decode tuning n{n} w{w} s{s}: {out[f'n{n}_w{w}_s{s}']:.0%} of HBM")
    return out


def _small_executor(dtype: str = "bf16") -> Any:
    """The `small` preset on CUDA with the Triton kernels, warmed up."""
    ex = RealExecutor.from_config(
        ExecutorConfig(
            model="small", block_size=16, num_blocks=20000, device="cuda", dtype=dtype, ops="triton"
        )
    )
    say(f"{ex.describe()}; warmup {ex.warmup():.2f}s")
    return ex


def stage_recompile(ctx: StageContext) -> dict[str, Any]:
    """Kernel variants compiled after warmup while step shapes vary (must stay 0)."""
    ex = _small_executor()
    before = compiled_variants()
    grid = CalibrationGrid(
        prefill_tokens=(0, 7, 64, 333),
        prefill_context=(0, 100, 1000),
        num_decodes=(0, 1, 3, 17, 64),
        decode_context=(15, 300, 2000),
        repeats=1,
    )
    t0 = time.perf_counter()
    steps = measure_steps(ex, grid)
    after = compiled_variants()
    new = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    say(
        f"{len(steps)} step shapes in {time.perf_counter() - t0:.1f}s after warmup; variants per kernel "
        f"{after}; compiled after warmup: {new or 'none'}"
    )
    if new:
        raise AssertionError(f"kernels compiled inside timed steps: {new}")
    return {"shapes": len(steps), "variants_after_warmup": after, "new_after_warmup": sum(new.values())}


def stage_host_device(ctx: StageContext) -> dict[str, Any]:
    """Per step shape: host time (packing inputs, enqueueing kernels) against device time."""
    ex = _small_executor()
    grid = CalibrationGrid(
        prefill_tokens=(0, 512, 2048),
        prefill_context=(0,),
        num_decodes=(0, 1, 16, 64, 256),
        decode_context=(1024,),
        repeats=3 if ctx.quick else 5,
    )
    steps = measure_steps(ex, grid)
    steps.to_csv(ctx.out / "steps_small_bf16.csv", index=False)
    rows = {}
    for r in steps.itertuples():
        key = f"p{r.prefill_tokens}_d{r.decode_count}"
        rows[key] = {
            "device_ms": r.step_time_s * 1e3,
            "host_prepare_ms": r.host_prepare_s * 1e3,
            "host_enqueue_ms": r.host_enqueue_s * 1e3,
        }
        say(
            f"{key:<12} device {r.step_time_s * 1e3:7.2f} ms  host: prepare {r.host_prepare_s * 1e3:6.2f} ms"
            f"  enqueue {r.host_enqueue_s * 1e3:6.2f} ms"
        )
    launch_bound = [k for k, v in rows.items() if v["host_enqueue_ms"] >= 0.9 * v["device_ms"]]
    say(f"steps whose enqueue takes as long as the device work (launch-bound): {launch_bound or 'none'}")
    return {
        "steps": rows,
        "launch_bound": launch_bound,
        "median_host_share": statistics.median(
            (v["host_prepare_ms"] + v["host_enqueue_ms"]) / max(v["device_ms"], 1e-9) for v in rows.values()
        ),
    }


def _run_cli(args: list[str], timeout: float) -> str:
    """Run a schedsim subcommand; its output, or an error naming the command."""
    say("$ schedsim " + " ".join(args))
    proc = subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout)
    say(proc.stdout.strip()[-3000:])
    if proc.returncode:
        raise RuntimeError(f"schedsim {args[0]} failed (rc {proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return proc.stdout


WORKLOAD = [
    "--trace",
    "azure-conv-2023",
    "--block-size",
    "16",
    "--num-gpu-blocks",
    "8192",
    "--max-model-len",
    "4096",
    "--policy",
    "vllm-async",
]
BACKEND = ["--real-model", "small", "--real-device", "cuda", "--real-dtype", "bf16"]


def stage_run(ctx: StageContext) -> dict[str, Any]:
    """`schedsim run --backend real` on a small workload: the summary's figures."""
    folder = ctx.work / "run"
    n = "24" if ctx.quick else "64"
    _run_cli(
        [
            "run",
            "--backend",
            "real",
            *BACKEND,
            *WORKLOAD,
            "--max-requests",
            n,
            "--rate",
            "16",
            "--out",
            str(folder),
            "--no-plots",
            "--no-progress",
        ],
        timeout=400,
    )
    summary = json.loads((folder / "summary.json").read_text())
    keys = (
        "backend_description",
        "num_requests",
        "duration_s",
        "output_throughput",
        "median_ttft_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "warmup_s",
    )
    return {k: summary[k] for k in keys if k in summary}


def stage_validate(ctx: StageContext) -> dict[str, Any]:
    """`schedsim validate` on a small workload: the simulator's step, TTFT and TPOT errors."""
    folder = ctx.work / "validate"
    n = "16" if ctx.quick else "32"
    _run_cli(
        [
            "validate",
            *BACKEND,
            *WORKLOAD,
            "--max-requests",
            n,
            "--rate",
            "8",
            "--grid",
            "quick",
            "--out",
            str(folder),
        ],
        timeout=500,
    )
    summary = json.loads((folder / "validation.json").read_text())["summary"]
    return {k: v for k, v in summary.items() if k.endswith("rel_err") or k in ("num_steps", "num_requests")}


def stage_tests(ctx: StageContext) -> dict[str, Any]:
    """The backend tests with the kernels compiled for CUDA (pass/fail counts)."""
    files = TEST_FILES[: 1 if ctx.quick else None]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *files]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    say(proc.stdout.strip()[-6000:])
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", proc.stdout)}
    if proc.returncode:
        raise AssertionError(f"pytest rc {proc.returncode}: {counts}")
    return counts


# The GPU tests first (the quick run's only file), then the backend tests that run on CUDA when it is there.
TEST_FILES = [
    "tests/backend/test_gpu.py",
    "tests/backend/test_attention.py",
    "tests/backend/test_kernels.py",
    "tests/backend/test_executor.py",
    "tests/backend/test_validation.py",
]


def check_files() -> None:
    """Every test file the tests stage names exists (a renamed one is caught by the dry run)."""
    missing = [f for f in TEST_FILES if not (ROOT / f).is_file()]
    if missing:
        raise FileNotFoundError(f"gpu_check_stages: test files not found: {missing}")


STAGES = {
    "aot": stage_aot,
    "kernels": stage_kernels,
    "microbench": stage_microbench,
    "recompile": stage_recompile,
    "host_device": stage_host_device,
    "run": stage_run,
    "validate": stage_validate,
    "tests": stage_tests,
}


def main() -> int:
    """Run one stage; write its figures (or its error) as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = parser.parse_args()
    ctx = StageContext(args.quick, args.out, args.work, args.workers)
    figures = STAGES[args.stage](ctx)
    args.json.write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
