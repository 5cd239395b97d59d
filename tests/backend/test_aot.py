"""Ahead-of-time compile of every Triton kernel for Hopper (sm_90) and Ampere (sm_80) at the presets'
and Llama-8B/70B shapes, without a GPU: no compile errors, no register spills, shared memory within
the target's limit, and tensor-core instructions where they belong (wgmma for 16-bit prefill on
sm_90). The compile runs in a subprocess (this one interprets the kernels); its table is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

MODELS = ["tiny", "mini", "small", "llama-1b", "llama-8b", "llama-70b"]
ATTENTION = ["prefill_attention_kernel", "decode_attention_kernel", "combine_splits_kernel"]
ELEMENTWISE = ["store_kv", "rms_norm", "rms_norm+residual", "rotary", "silu_and_mul"]


def compile_reports(tmp_path, args: list[str]) -> list[dict]:
    """Run the AOT compile CLI in a process where @triton.jit builds real JIT functions."""
    out = tmp_path / "aot.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "schedsim.backend.kernels.aot", "--workers", "2", "--json", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    print(proc.stdout[-20000:])
    if not out.exists():
        pytest.fail(f"AOT compile produced no report (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """sm_90: every kernel, model and dtype; sm_80: the attention kernels, every model and dtype."""
    tmp = tmp_path_factory.mktemp("aot")
    return compile_reports(tmp, ["--arch", "90"]) + compile_reports(
        tmp, ["--arch", "80", "--kernels", *ATTENTION]
    )


def test_every_variant_compiles_without_spills_within_limits(reports):
    bad = [r for r in reports if not r["ok"]]
    assert not bad, "\n".join(
        f"{r['kernel']} {r['dtype']} sm_{r['arch']} {r['models']}: "
        f"regs {r['registers']} spill {r['spill_bytes']} smem {r['shared_bytes']} "
        f"{r['error']}"
        for r in bad
    )
    assert all(0 < r["registers"] <= 255 for r in reports)


def test_every_kernel_model_dtype_and_target_was_compiled(reports):
    seen = {(r["kernel"], model, r["dtype"], r["arch"]) for r in reports for model in r["models"].split(",")}
    for dtype in ("fp32", "fp16", "bf16"):
        for model in MODELS:
            for kernel in ATTENTION + ELEMENTWISE:
                assert (kernel, model, dtype, 90) in seen
            for kernel in ATTENTION:
                assert (kernel, model, dtype, 80) in seen


def test_attention_runs_on_tensor_cores(reports):
    for r in reports:
        if r["kernel"] == "prefill_attention_kernel" and r["dtype"] in ("fp16", "bf16"):
            assert r["mma"] == ("wgmma" if r["arch"] == 90 else "mma.sync"), r
            assert r["num_warps"] % 4 == 0  # whole warpgroups
        if r["kernel"] == "decode_attention_kernel":
            assert r["mma"] in ("wgmma", "mma.sync"), r
