"""The one run to make the moment a GPU is available: what works on it and how fast, in ten minutes.

    python bench/gpu_check.py [--quick] [--dry-run] [--out DIR] [--wheels DIR] [--budget SECONDS]

It needs nothing but a Python with torch and Triton: missing packages are installed from a wheel
folder (--wheels, default .whl/) or the package index; this checkout is made importable without
installing it. Then, each stage in its own process with its own timeout, inside one overall budget:
aot (compile every kernel for sm_90/sm_80), kernels (correctness against the references, fp32/bf16/
fp16), microbench (GB/s and TFLOP/s against measured ceilings and flash SDPA), recompile (variants
compiled after warmup), host_device (host vs device time per step), run (`schedsim run --backend
real`), validate (`schedsim validate`), tests (the backend tests on CUDA). Everything printed is
teed into OUT/gpu_check.log; the figures go to OUT/gpu_check.json (OUT: --out, else $OUT, else
runs/gpu_check). --dry-run walks every stage on a CPU, skipping the device parts with a line each.
Exit status: 0 all stages passed, 1 a stage failed or timed out, 2 no GPU (nothing measured).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
STAGES_SCRIPT = Path(__file__).resolve().parent / "gpu_check_stages.py"
# import name -> package to install when missing
REQUIRED = {
    "torch": "torch",
    "triton": "triton",
    "numpy": "numpy",
    "pandas": "pandas",
    "simpy": "simpy",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "pyarrow": "pyarrow",
    "mypy_extensions": "mypy_extensions",
    "safetensors": "safetensors",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
}


@dataclass(frozen=True)
class Stage:
    """One stage: its timeouts (full, quick) and what it runs on the device (the dry-run's lines)."""

    name: str
    timeout_s: int
    quick_timeout_s: int
    device_parts: tuple[str, ...]  # empty: runs on a CPU too (aot)


STAGES = (
    Stage("aot", 200, 100, ()),
    Stage(
        "kernels",
        150,
        100,
        (
            "paged attention (mixed, decode, prefill; d64/d128) vs the torch reference "
            "at fp32/bf16/fp16 tolerances",
            "bf16 Llama-8B-shaped layers vs the dense fp32 forward",
        ),
    ),
    Stage(
        "microbench",
        150,
        90,
        (
            "HBM copy and bf16 GEMM ceilings",
            "decode attention GB/s (batch 64, context 2k, head_dim 128; batch 1 at 32k; batch 4 at 8k)",
            "prefill attention TFLOP/s vs flash SDPA (4x2k, 1x8k)",
            "alternative block shapes (full mode)",
        ),
    ),
    Stage(
        "recompile",
        90,
        60,
        ("small preset, bf16: kernel variants compiled after warmup over 100+ step shapes",),
    ),
    Stage("host_device", 90, 60, ("small preset, bf16: host prepare / enqueue vs device ms per step shape",)),
    Stage("run", 200, 120, ("schedsim run --backend real --real-device cuda --real-model small",)),
    Stage("validate", 200, 150, ("schedsim validate (small, bf16): step / TTFT / TPOT errors",)),
    Stage("tests", 240, 120, ("pytest tests/backend on CUDA (quick: test_backend_gpu.py only)",)),
)


class Tee:
    """Print to the console and append to the log file."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = path.open("a")

    def __call__(self, line: str = "") -> None:
        """One line to both."""
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def missing_modules(names: dict[str, str]) -> list[str]:
    """Import names that do not import here."""
    missing = []
    for module in names:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - ImportError, or a broken install raising anything
            missing.append(module)
    return missing


def install(packages: list[str], wheels: Path | None, log: Tee, dry_run: bool) -> list[str]:
    """Install from the wheel folder, else the package index; returns those still missing."""
    if not packages:
        return []
    sources = [["--no-index", "--find-links", str(wheels)]] if wheels and wheels.is_dir() else []
    sources.append(["--retries", "0", "--timeout", "15"])
    for source in sources:
        cmd = [sys.executable, "-m", "pip", "install", "-q", *source, *packages]
        if dry_run:
            log(f"  dry run: would run {' '.join(cmd)}")
            return packages
        log(f"  $ {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log("  " + (proc.stderr.strip().splitlines() or ["ok"])[-1])
        importlib.invalidate_caches()
        packages = [p for p in packages if p in missing_modules({p: p})]
        if not packages:
            break
    return packages


def link_tree(root: Path, dest: Path) -> Path:
    """Make this checkout importable without installing it: pyproject's package-dir map, laid out
    as links under dest (schedsim -> sim/, schedsim.backend -> backend/, ...)."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(mapping.items(), key=lambda kv: kv[0].count(".")):
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for entry in (root / folder).iterdir():
            link = target / entry.name
            if not link.exists() and entry.name != "__pycache__":
                link.symlink_to(entry)
    return dest


def schedsim_path(log: Tee) -> str | None:
    """A PYTHONPATH entry that imports this checkout's schedsim, or None when it already does."""
    probe = subprocess.run(
        [sys.executable, "-c", "import schedsim.backend as b; print(b.__file__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0 and Path(probe.stdout.strip()).resolve().is_relative_to(ROOT):
        log(f"schedsim: installed from this checkout ({probe.stdout.strip()})")
        return None
    tree = link_tree(ROOT, Path(tempfile.mkdtemp(prefix="schedsim-tree-")))
    log(f"schedsim: not installed from this checkout; importing it through links in {tree}")
    return str(tree)


def versions(log: Tee) -> dict[str, Any]:
    """Python, torch, Triton, CUDA, the GPU; and the versions this project pins."""
    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for module in ("torch", "triton", "numpy", "pandas", "simpy"):
        try:
            info[module] = importlib.import_module(module).__version__
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            info[module] = f"unavailable ({type(exc).__name__})"
    try:
        import torch

        info["cuda_available"] = torch.cuda.is_available()
        info["torch_cuda"] = torch.version.cuda
        if info["cuda_available"]:
            props = torch.cuda.get_device_properties(0)
            info |= {
                "gpu": props.name,
                "sms": props.multi_processor_count,
                "capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
            }
    except Exception as exc:  # noqa: BLE001
        info["cuda_available"] = False
        info["torch_error"] = str(exc)
    info["nvidia_smi"] = nvidia_smi()
    info["pinned"] = "torch 2.13 / triton 3.7.1 (pyproject backend extra)"
    for key, value in info.items():
        log(f"  {key}: {value}")
    if info.get("triton") not in ("3.7.1", None):
        log(f"  note: Triton {info.get('triton')} is not the pinned 3.7.1; the kernels run on it as found")
    return info


def nvidia_smi() -> str:
    """The GPU's name, driver, top SM clock and memory as nvidia-smi reports them."""
    from shutil import which

    if which("nvidia-smi") is None:
        return "not available"
    proc = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else "not available"


def run_stage(
    stage: Stage, args: argparse.Namespace, env: dict[str, str], work: Path, timeout: float, log: Tee
) -> dict[str, Any]:
    """Run one stage in a child process under a timeout, teeing its output; its record."""
    figures = work / f"{stage.name}.json"
    cmd = [
        sys.executable,
        str(STAGES_SCRIPT),
        stage.name,
        "--out",
        str(args.out),
        "--work",
        str(work),
        "--json",
        str(figures),
    ] + (["--quick"] if args.quick else [])
    t0 = time.perf_counter()
    # Its own process group, so a timeout ends its helpers (compile workers, pytest, the CLI) too.
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    reader = threading.Thread(target=_pump, args=(proc, log), daemon=True)
    reader.start()
    status = "ok"
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = "timeout"
    reader.join(timeout=5)
    if status == "ok" and proc.returncode:
        status = "failed"
    record: dict[str, Any] = {"status": status, "seconds": round(time.perf_counter() - t0, 1)}
    if status == "ok" and figures.exists():
        record["figures"] = json.loads(figures.read_text())
    return record


def _pump(proc: subprocess.Popen, log: Tee) -> None:
    """Tee a stage's output line by line while it runs."""
    for line in proc.stdout or ():
        log(f"  {line.rstrip()}")


def dry_run_stage(stage: Stage, log: Tee) -> dict[str, Any]:
    """A device stage on a CPU: the process it would start, and one line per part it would run."""
    log(f"  would run: {STAGES_SCRIPT.name} {stage.name} --out OUT --work WORK --json {stage.name}.json")
    for part in stage.device_parts:
        log(f"  SKIP {stage.name}: {part} (needs a CUDA device)")
    return {"status": "skipped", "seconds": 0.0, "would_run": list(stage.device_parts)}


def dry_run_aot(args: argparse.Namespace, env: dict[str, str], log: Tee) -> dict[str, Any]:
    """The AOT stage on a CPU, cut to one model and one target (it needs no GPU)."""
    report = args.out / "aot.json"
    env = {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}
    cmd = [
        sys.executable,
        "-m",
        "schedsim.backend.kernels.aot",
        "--arch",
        "90",
        "--models",
        "tiny",
        "--dtypes",
        "bf16",
        "--workers",
        "1",
        "--json",
        str(report),
    ]
    log(
        f"  dry run: AOT compile cut to tiny/bf16/sm_90 (the CI test compiles the full matrix): "
        f"{' '.join(cmd[1:])}"
    )
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    for line in (proc.stdout.strip() or proc.stderr.strip()[-2000:]).splitlines():
        log(f"  {line}")
    ok = proc.returncode == 0
    return {"status": "ok" if ok else "failed", "seconds": round(time.perf_counter() - t0, 1)}


def check_stage_code(env: dict[str, str], log: Tee) -> None:
    """Import the stages' module as a stage process would (catches a broken stage before a GPU)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import gpu_check_stages as s; s.check_files(); print(', '.join(s.STAGES))"],
        cwd=STAGES_SCRIPT.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        raise SystemExit(f"gpu_check: the stage code does not import: {probe.stderr.strip()[-2000:]}")
    log(f"stage code imports: {probe.stdout.strip()}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a lighter rerun (about half the time)")
    parser.add_argument("--dry-run", action="store_true", help="walk every stage without a GPU")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "runs" / "gpu_check")
    )
    parser.add_argument(
        "--wheels", type=Path, default=ROOT / ".whl", help="wheel folder for missing packages"
    )
    parser.add_argument("--budget", type=float, default=570.0, help="seconds for the whole run")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in STAGES], help="run only these stages")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Bootstrap, then every stage within the budget; write the log and the JSON of figures."""
    args = parse_args(argv)
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    log = Tee(args.out / "gpu_check.log")
    mode = "dry-run" if args.dry_run else "quick" if args.quick else "full"
    log(f"gpu_check {mode}: {time.ctime()}, out {args.out}")
    still = install(missing_modules(REQUIRED), args.wheels, log, args.dry_run)
    if still:
        log(f"missing packages: {still}")
    env = dict(os.environ, SCHEDSIM_PURE="1", PYTHONUNBUFFERED="1")
    extra = schedsim_path(log)
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([extra, str(STAGES_SCRIPT.parent), env.get("PYTHONPATH", "")])
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(STAGES_SCRIPT.parent), env.get("PYTHONPATH", "")])
    env.pop("TRITON_INTERPRET", None)
    result: dict[str, Any] = {"mode": mode, "versions": versions(log), "stages": {}}
    gpu = bool(result["versions"].get("cuda_available")) and not args.dry_run
    if not gpu and not args.dry_run:
        log("no CUDA device here: walking the stages as a dry run")
    check_stage_code(env, log)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for stage in STAGES:
        if args.only and stage.name not in args.only:
            continue
        left = args.budget - (time.perf_counter() - start)
        timeout = min(stage.quick_timeout_s if args.quick else stage.timeout_s, left - 5)
        log(f"== {stage.name} (timeout {max(timeout, 0):.0f}s, {left:.0f}s of the budget left)")
        if not gpu:
            record = dry_run_aot(args, env, log) if stage.name == "aot" else dry_run_stage(stage, log)
        elif timeout < 20:
            record = {"status": "skipped", "seconds": 0.0, "reason": "out of budget"}
            log(f"  SKIP {stage.name}: out of budget")
        else:
            record = run_stage(stage, args, env, work, timeout, log)
        result["stages"][stage.name] = record
        log(f"-> {stage.name}: {record['status']} in {record['seconds']}s")
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    result["seconds"] = round(time.perf_counter() - start, 1)
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    bad = [n for n, r in result["stages"].items() if r["status"] in ("failed", "timeout")]
    log(
        f"gpu_check done in {result['seconds']}s: "
        + ", ".join(f"{n} {r['status']}" for n, r in result["stages"].items())
    )
    if bad:
        return 1
    return 0 if gpu or args.dry_run else 2


if __name__ == "__main__":
    sys.exit(main())
