"""`schedsim sweep`: grid from flags or TOML, process pool, resume without redoing, plots, Ray."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from schedsim.cli.main import main
from schedsim.experiments import sweep as sweep_mod
from schedsim.experiments.sweep import expand_grid, run_sweep
from schedsim.run.config import RunConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2 x 2 grid run on the process pool (2 workers) from the command line."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    rc = main(
        [
            "sweep",
            "--grid",
            "policy=vllm,vllm-async",
            "--grid",
            "rate=2,8",
            "--max-requests",
            "16",
            "--workers",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    return out


def test_sweep_writes_one_tidy_row_per_run(swept: Path) -> None:
    table = pd.read_parquet(swept / "results.parquet")
    assert len(table) == 4 and table["run_id"].is_unique
    assert set(zip(table["policy"], table["rate"], strict=True)) == {
        (p, r) for p in ("vllm", "vllm-async") for r in (2, 8)
    }
    assert (table["num_requests"] == 16).all() and table["p99_ttft_ms"].notna().all()
    assert len(list((swept / "runs").glob("*.json"))) == 4


def test_sweep_plots_each_metric_against_the_knob(swept: Path) -> None:
    png = swept / "sweep_p99_ttft_ms_vs_rate.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000
    assert len(list(swept.glob("sweep_*_vs_rate.png"))) >= 5


def test_resume_redoes_nothing_and_runs_only_new_points(swept: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[RunConfig] = []

    def fake(config: RunConfig) -> dict:
        calls.append(config)
        return {"num_requests": 16, "p99_ttft_ms": 1.0}

    monkeypatch.setattr(sweep_mod, "simulate_one", fake)
    before = {p.name: p.stat().st_mtime_ns for p in (swept / "runs").glob("*.json")}
    base = RunConfig(max_requests=16)
    table = run_sweep(
        expand_grid(base, {"policy": ["vllm-async", "vllm"], "rate": [8, 2]}),
        swept,
        workers=1,
        progress=False,
    )
    assert calls == [] and len(table) == 4  # the same grid in another order: nothing redone
    assert {p.name: p.stat().st_mtime_ns for p in (swept / "runs").glob("*.json")} == before
    table = run_sweep(
        expand_grid(base, {"policy": ["vllm", "vllm-async"], "rate": [2, 8, 4]}),
        swept,
        workers=1,
        progress=False,
    )
    assert sorted((c.policy, c.rate) for c in calls) == [("vllm", 4), ("vllm-async", 4)]
    assert len(table) == 6


def test_sweep_from_toml_with_runs_list(tmp_path: Path) -> None:
    f = tmp_path / "sweep.toml"
    f.write_text(
        'max_requests = 8\npolicy = "vllm"\n'
        "[grid]\nmax_num_batched_tokens = [256, 1024]\n"
        "[[runs]]\ncpu_cost_scale = 1.0\n[[runs]]\ncpu_cost_scale = 4.0\n"
        '[sweep]\nx = "max_num_batched_tokens"\nmetrics = ["mean_tpot_ms"]\nworkers = 1\n'
    )
    out = tmp_path / "out"
    assert main(["sweep", "--config", str(f), "--out", str(out), "--no-progress"]) == 0
    table = pd.read_parquet(out / "results.parquet")
    assert sorted(zip(table["cpu_cost_scale"], table["max_num_batched_tokens"], strict=True)) == [
        (1.0, 256),
        (1.0, 1024),
        (4.0, 256),
        (4.0, 1024),
    ]
    assert (out / "sweep_mean_tpot_ms_vs_max_num_batched_tokens.png").is_file()
    rec = json.loads(next((out / "runs").glob("*.json")).read_text())
    assert rec["config"]["max_requests"] == 8 and rec["config"]["policy"] == "vllm"


def test_sweep_toml_errors_name_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("[grid]\nmax_num_seq = [1, 2]\n")
    assert main(["sweep", "--config", str(f), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'max_num_seq'" in err and str(f) in err
    f.write_text('[sweep]\nengines = "ray"\n')
    assert main(["sweep", "--config", str(f), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "'engines'" in capsys.readouterr().err


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'schedsim[ray]')"
)
def test_sweep_on_a_local_ray_cluster(tmp_path: Path) -> None:
    runs = expand_grid(RunConfig(max_requests=8), {"policy": ["vllm", "vllm-async"]})
    table = run_sweep(runs, tmp_path, engine="ray", workers=2, progress=False)
    assert sorted(table["policy"]) == ["vllm", "vllm-async"] and (table["num_requests"] == 8).all()
