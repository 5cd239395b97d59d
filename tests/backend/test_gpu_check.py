"""bench/gpu_check.py, the run prepared for a lent GPU: its dry run walks every stage on a CPU in
under a minute, it makes this checkout importable without an install, and its stage runner keeps
per-stage timeouts and figures."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"


def load_script(path: Path):
    """A bench script as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_check():
    """The script as a module."""
    return load_script(SCRIPT)


def test_dry_run_walks_every_stage(tmp_path, gpu_check):
    """Its duration is a benchmark figure (bench/RESULTS.md), not asserted: CI machines vary."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "OUT")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (tmp_path / "gpu_check.log").read_text()
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["mode"] == "dry-run" and "torch" in result["versions"]
    assert list(result["stages"]) == [s.name for s in gpu_check.STAGES]
    assert result["stages"]["aot"]["status"] == "ok"  # compiled for sm_90 on this CPU
    assert "prefill_attention_kernel" in log and "wgmma" in log
    for stage in gpu_check.STAGES[1:]:
        assert result["stages"][stage.name]["status"] == "skipped"
        for part in stage.device_parts:
            assert f"SKIP {stage.name}: {part} (needs a CUDA device)" in log
    assert "stage code imports: aot, kernels, microbench" in log


def test_link_tree_imports_this_checkout_without_an_install(tmp_path, gpu_check):
    tree = gpu_check.link_tree(ROOT, tmp_path / "tree")
    code = (
        "import schedsim.backend.kernels.aot as a, schedsim.run.config as c; "
        "print(a.__file__); print(c.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, SCHEDSIM_PURE="1", PYTHONPATH=str(tree)),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    paths = proc.stdout.split()
    assert paths == [
        str(tree / "schedsim" / "backend" / "kernels" / "aot.py"),
        str(tree / "schedsim" / "run" / "config.py"),
    ]
    assert Path(paths[0]).resolve() == ROOT / "backend" / "kernels" / "aot.py"


def test_missing_packages_come_from_the_wheel_folder_first(tmp_path, gpu_check):
    log = gpu_check.Tee(tmp_path / "log")
    assert gpu_check.missing_modules({"json": "json", "no_such_module_xyz": "x"}) == ["no_such_module_xyz"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert gpu_check.install(["simpy"], wheels, log, dry_run=True) == ["simpy"]
    text = (tmp_path / "log").read_text()
    assert f"--no-index --find-links {wheels} simpy" in text


def test_stage_runner_keeps_figures_and_enforces_timeouts(tmp_path, gpu_check, monkeypatch):
    fake = tmp_path / "stages.py"
    fake.write_text(
        "import json, sys, time\n"
        "args = sys.argv[1:]\n"
        "print('working on', args[0], flush=True)\n"
        "if args[0] == 'slow':\n    time.sleep(60)\n"
        "if args[0] == 'broken':\n    raise SystemExit(3)\n"
        "open(args[args.index('--json') + 1], 'w').write(json.dumps({'gb_s': 4321.0}))\n"
    )
    monkeypatch.setattr(gpu_check, "STAGES_SCRIPT", fake)
    args = gpu_check.parse_args(["--out", str(tmp_path / "out")])
    log = gpu_check.Tee(tmp_path / "log")
    records = {}
    for name in ("fast", "slow", "broken"):
        stage = gpu_check.Stage(name, 3, 3, ("x",))
        t0 = time.perf_counter()
        records[name] = gpu_check.run_stage(stage, args, dict(os.environ), tmp_path, 3, log)
        assert time.perf_counter() - t0 < 20
    assert records["fast"]["status"] == "ok" and records["fast"]["figures"] == {"gb_s": 4321.0}
    assert records["slow"]["status"] == "timeout" and records["broken"]["status"] == "failed"
    assert "  working on fast" in (tmp_path / "log").read_text()


def test_microbenchmark_inputs_and_accounting():
    """The benchmarks' batches are valid paged batches, and their bytes and FLOPs are counted right."""
    torch = pytest.importorskip("torch")
    bench = load_script(ROOT / "bench" / "gpu_microbench.py")
    AttentionShape, paged_inputs = bench.AttentionShape, bench.paged_inputs
    from schedsim.backend.kernels import check_block_tables, get_ops, triton_status
    from schedsim.backend.kernels import reference as ref

    decode = AttentionShape(64, 2047, 1)
    assert decode.kv_bytes(2) == 2 * 64 * 2048 * 8 * 128 * 2  # 512 MiB of K and V
    prefill = AttentionShape(4, 0, 2048)
    assert prefill.causal_flops() == 4 * 128 * 32 * 4 * (2048 * 2049 // 2)
    chunk = AttentionShape(1, 10, 3, heads=2, kv_heads=1, head_dim=4)
    assert chunk.causal_flops() == 4 * 4 * 2 * (3 * 10 + 6)  # each new token sees the prefix and itself
    shape = AttentionShape(3, 21, 1, heads=4, kv_heads=2, head_dim=16, page=4)
    q, kc, vc, meta = paged_inputs(shape, torch.float32, device="cpu")
    check_block_tables(meta.block_tables, meta.seq_lens, kc.shape[0], 4)
    assert sorted(meta.block_tables.flatten().tolist()) == list(range(1, kc.shape[0]))  # each page once
    if triton_status()[0] and not torch.cuda.is_available():
        got = get_ops("triton").paged_attention(q, kc, vc, meta, 0.25)
        assert float((got - ref.paged_attention_ref(q, kc, vc, meta, 0.25)).abs().max()) < 1e-5
    with pytest.raises(ValueError, match="not a multiple"):
        AttentionShape(1, 0, 1, heads=6, kv_heads=4)
