"""Ahead-of-time compile of every Triton kernel for a GPU target, on a machine without one.

The launch plans the kernels run with are built from CPU tensors of a model's real shapes, bound the
way Triton's JIT binds them (same argument types, divisibility, constexprs, warps and stages) and
compiled with `triton.compile(..., target=GPUTarget("cuda", 90, 32))`; ptxas (shipped in Triton's
wheel) reports registers and spills. Run it in a process without TRITON_INTERPRET=1:

    python -m schedsim.backend.kernels.aot [--arch 90 80] [--models tiny llama-8b] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import PRESETS, ModelConfig
from ..dtypes import ALIASES
from ..dtypes import DTYPES as FULL_DTYPES
from .launch import Launch
from .specialization import as_jit, bind

# Shapes only (no weights are built): Llama-3.1-8B and -70B per-layer geometry.
REFERENCE_MODELS: dict[str, dict[str, Any]] = {
    "llama-8b": dict(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_theta=500000.0,
        max_position_embeddings=131072,
    ),
    "llama-70b": dict(
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        rope_theta=500000.0,
        max_position_embeddings=131072,
    ),
}
MODELS = {**PRESETS, **REFERENCE_MODELS}
DTYPES = {alias: FULL_DTYPES[name] for alias, name in ALIASES.items()}
KERNELS = [
    "decode_attention_kernel",
    "combine_splits_kernel",
    "prefill_attention_kernel",
    "store_kv",
    "rms_norm",
    "rms_norm+residual",
    "rotary",
    "silu_and_mul",
]
SHARED_LIMIT = {90: 232448, 80: 166912}  # bytes of shared memory one block may use (opt-in maximum)


@dataclass(frozen=True)
class CompileReport:
    """What one compiled variant costs on the target."""

    kernel: str
    models: str  # every model whose shapes compile to this same variant, comma-separated
    dtype: str
    arch: int
    registers: int
    spill_bytes: int  # spill stores + spill loads reported by ptxas
    shared_bytes: int
    num_warps: int
    num_stages: int
    mma: str  # wgmma | mma.sync | none
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        """Compiled, no spills, within the target's register and shared-memory limits."""
        return (
            not self.error
            and self.spill_bytes == 0
            and self.registers <= 255
            and self.shared_bytes <= SHARED_LIMIT.get(self.arch, 232448)
        )


def model_launches(name: str, dtype: torch.dtype, page: int = 16) -> dict[str, Launch]:
    """Every kernel the model runs, planned at its shapes: attention (prefill, split decode, combine),
    KV store, RMSNorm with and without residual, rotary, SiLU-and-mul."""
    from .metadata import AttentionMetadata
    from .triton_attention import DEFAULT_TUNING, plan_paged_attention
    from .triton_elementwise import plan_rms_norm, plan_rotary, plan_silu_and_mul, plan_store_kv

    cfg = ModelConfig.from_dict(MODELS[name], source=name)
    hq, hk, d, h, inter = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.hidden_size,
        cfg.intermediate_size,
    )
    tokens = 7  # a 6-token prefill chunk and one decode over a long context: every attention launch
    q = torch.zeros(tokens, hq, d, dtype=dtype)
    kv = torch.zeros(tokens, hk, d, dtype=dtype)
    cache = torch.zeros(4, page, hk, d, dtype=dtype)
    i32 = torch.int32
    meta = AttentionMetadata(
        torch.tensor([0, 6, 7], dtype=i32),
        torch.tensor([6, 4096], dtype=i32),
        torch.zeros(2, 256, dtype=torch.int32),
        torch.zeros(tokens, dtype=torch.int64),
        max_query_len=6,
        max_seq_len=4096,
        num_decodes=1,
    )
    attention = plan_paged_attention(
        q, cache, cache.clone(), meta, d**-0.5, torch.empty_like(q), DEFAULT_TUNING
    )
    x, w = torch.zeros(tokens, h, dtype=dtype), torch.zeros(h, dtype=dtype)
    launches = {launch.name: launch for launch in attention}
    launches["store_kv"] = plan_store_kv(kv, kv.clone(), cache, cache.clone(), meta.slot_mapping)
    launches["rms_norm"] = plan_rms_norm(x, w, 1e-5, x.clone(), False, x.clone(), x.clone())
    launches["rms_norm+residual"] = plan_rms_norm(x, w, 1e-5, x.clone(), True, x.clone(), x.clone())
    launches["rotary"] = plan_rotary(torch.zeros(tokens, dtype=torch.int64), q, kv, torch.zeros(64, d))
    launches["silu_and_mul"] = plan_silu_and_mul(
        torch.zeros(tokens, 2 * inter, dtype=dtype), torch.zeros(tokens, inter, dtype=dtype)
    )
    return launches


def ptxas_usage(ptx: str, arch: int) -> tuple[int, int]:
    """(registers, spill bytes) as ptxas reports them for this PTX on sm_<arch>."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        cmd = [
            get_ptxas(arch).path,
            "-v",
            "--regAllocOptLevel=2",
            f"--gpu-name={sm_arch_from_capability(arch)}",
            str(src),
            "-o",
            str(Path(tmp) / "k.cubin"),
        ]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    regs = max((int(m) for m in re.findall(r"Used (\d+) registers", log)), default=0)
    spills = sum(int(m) for m in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return regs, spills


def compile_launch(launch: Launch, arch: int) -> tuple[int, int, int, str]:
    """Compile for sm_<arch>: (registers, spill bytes, shared bytes, mma instruction family)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    target = GPUTarget("cuda", arch, 32)
    bound = bind(launch, target)
    kernel = compile(
        ASTSource(as_jit(launch.kernel), bound.signature, bound.constexprs, bound.attrs),
        target=target,
        options=bound.options,
    )
    ptx = kernel.asm["ptx"]
    mma = "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else "none"
    regs, spills = ptxas_usage(ptx, arch)
    return regs, spills, int(kernel.metadata.shared), mma


def _compile_task(task: tuple[str, str, str, int, str]) -> CompileReport:
    """Worker: rebuild the launch (tensors stay in this process) and compile it."""
    kernel, model, dtype, arch, models = task
    launch = model_launches(model, DTYPES[dtype])[kernel]
    t0 = time.perf_counter()
    try:
        regs, spills, shared, mma = compile_launch(launch, arch)
        error = ""
    except Exception as exc:  # noqa: BLE001 - a failed compile is a reported result, not a crash
        regs = spills = shared = 0
        mma, error = "none", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return CompileReport(
        kernel,
        models,
        dtype,
        arch,
        regs,
        spills,
        shared,
        launch.kwargs.get("num_warps", 4),
        launch.kwargs.get("num_stages", 3),
        mma,
        time.perf_counter() - t0,
        error,
    )


def compile_tasks(
    models: list[str], dtypes: list[str], archs: list[int], kernels: list[str] | None = None
) -> list[tuple[str, str, str, int, str]]:
    """One task per distinct variant (of the named kernels, default all): models whose shapes bind
    identically share a compile."""
    from triton.backends.compiler import GPUTarget

    groups: dict[tuple[Any, ...], list[Any]] = {}
    for arch in archs:
        for dtype in dtypes:
            for model in models:
                for kernel, launch in model_launches(model, DTYPES[dtype]).items():
                    if kernels and kernel not in kernels:
                        continue
                    key = (arch, kernel, bind(launch, GPUTarget("cuda", arch, 32)).key)
                    groups.setdefault(key, [kernel, model, dtype, arch, []])[4].append(model)
    return [(k, m, d, a, ",".join(ms)) for k, m, d, a, ms in groups.values()]


def compile_all(
    models: list[str], dtypes: list[str], archs: list[int], workers: int = 2, kernels: list[str] | None = None
) -> list[CompileReport]:
    """Compile every distinct variant, `workers` processes at a time (compiles are CPU-bound)."""
    if _interpreting():
        raise RuntimeError("AOT compile needs real JIT functions: run without TRITON_INTERPRET=1")
    tasks = compile_tasks(models, dtypes, archs, kernels)
    if workers <= 1:
        return [_compile_task(t) for t in tasks]
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_compile_task, tasks))


def _interpreting() -> bool:
    """True when @triton.jit builds interpreter functions in this process."""
    import triton

    return bool(triton.knobs.runtime.interpret)


def format_table(reports: list[CompileReport]) -> str:
    """One line per variant: kernel, dtype, arch, registers, spills, shared memory, mma, models."""
    head = (
        f"{'kernel':<26}{'dtype':<6}{'sm':>4}{'regs':>6}{'spill':>7}{'smem KB':>9}{'warps':>6}"
        f"{'stages':>7}  {'mma':<9}{'s':>6}  models"
    )
    lines = [head]
    for r in sorted(reports, key=lambda r: (r.arch, r.kernel, r.dtype, r.models)):
        flag = "" if r.ok else "  <-- " + (r.error or "spills / over limit")
        lines.append(
            f"{r.kernel:<26}{r.dtype:<6}{r.arch:>4}{r.registers:>6}{r.spill_bytes:>7}"
            f"{r.shared_bytes / 1024:>9.1f}{r.num_warps:>6}{r.num_stages:>7}  {r.mma:<9}"
            f"{r.seconds:>6.1f}  {r.models}{flag}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Compile, print the table, optionally write JSON; exit 1 if any variant failed or spilled."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[90, 80])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--kernels", nargs="+", default=None, choices=KERNELS, help="default: all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write the reports here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    reports = compile_all(args.models, args.dtypes, args.arch, args.workers, args.kernels)
    print(format_table(reports))
    bad = [r for r in reports if not r.ok]
    print(f"{len(reports)} variants in {time.perf_counter() - t0:.1f}s; {len(bad)} failed or spilled")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"ok": r.ok} for r in reports], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
