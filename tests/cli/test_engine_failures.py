"""A policy that stops where the engine it models itself fails (TensorRT-LLM's wedge on a pool too
small for a prompt) ends `run` and `compare` with one line naming the run, exit 4, nothing written;
a sweep records the failure as that point's row and goes on, through a process pool too."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from schedsim.cli.exit_codes import EXIT_ENGINE_FAILS, EXIT_STRICT
from schedsim.cli.main import main

pytestmark = pytest.mark.pure_python

# 4 usable blocks of 16 tokens: the first prompt needs more, so max-utilization can never schedule it
WEDGED = ["--num-gpu-blocks", "5", "--max-requests", "5", "--no-progress", "--no-plots"]
REPORT = "TensorRT-LLM itself fails here (wedge), step 0: TensorRT-LLM's max-utilization scheduler"


def test_run_stops_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = ["run", "--policy", "trtllm:max-utilization", *WEDGED, "--out", str(out)]
    assert main(argv) == EXIT_ENGINE_FAILS
    err = capsys.readouterr().err
    assert err.startswith(f"schedsim: error: trtllm:max-utilization: {REPORT} can never schedule request 0")
    assert err.endswith("; nothing written\n") and err.count("\n") == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_compare_names_the_variant_that_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    argv = ["compare", "--policies", "trtllm:max-requests,trtllm:max-utilization", *WEDGED, "--out", str(out)]
    assert main(argv) == EXIT_ENGINE_FAILS
    err = capsys.readouterr().err
    assert err.startswith(f"schedsim: error: variant 'trtllm:max-utilization': {REPORT}")
    assert not out.exists()


@pytest.mark.parametrize("workers", ["1", "2"])  # in this process, and through a process pool
def test_a_sweep_records_the_failed_point_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    out = tmp_path / "s"
    argv = [
        "sweep",
        "--policy",
        "trtllm:max-utilization",
        "--grid",
        "num_gpu_blocks=5,3000",
        "--max-model-len",
        "4096",
        "--max-requests",
        "5",
        "--no-progress",
        "--workers",
        workers,
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"schedsim: warning: run {{'num_gpu_blocks': 5}}: {REPORT}" in err
    assert err.count("its row has no metrics") == 1
    table = pd.read_parquet(out / "results.parquet").set_index("num_gpu_blocks")
    assert table.loc[5, "engine_failure"] == "wedge" and table.loc[5, "engine_failure_step"] == 0
    assert table.loc[5, "engine_failure_message"].startswith(REPORT)
    assert pd.isna(table.loc[5, "mean_ttft_ms"])
    assert table.loc[3000, "num_finished"] == 5 and pd.isna(table.loc[3000, "engine_failure"])
    records = sorted((out / "runs").glob("*.json"))
    before = [p.read_text() for p in records]
    assert main(argv) == 0  # resumed: the failure is the point's recorded result, not rerun
    assert "rerunning" not in capsys.readouterr().err
    assert [p.read_text() for p in sorted((out / "runs").glob("*.json"))] == before
    assert any(json.loads(t)["metrics"].get("engine_failure") == "wedge" for t in before)


def test_a_sweep_warns_of_each_points_rejections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--grid", "rate=2,4", "--max-requests", "20", "--max-model-len", "256"]
    argv += ["--no-progress", "--workers", "1", "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    for rate in (2, 4):
        assert f"schedsim: warning: run {{'rate': {rate}}}: " in err
    assert err.count("requests rejected") == 2 and "max_model_len=256" in err
    assert main([*argv, "--strict"]) == EXIT_STRICT  # resumed from the records, refused all the same
    assert capsys.readouterr().err.count("schedsim: error: ") == 2


def test_a_cluster_names_the_replica_that_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    argv = ["run", "--replicas", "2", "--policy", "trtllm:max-utilization", *WEDGED, "--out", str(out)]
    assert main(argv) == EXIT_ENGINE_FAILS
    err = capsys.readouterr().err
    assert err.startswith(f"schedsim: error: trtllm:max-utilization: replica 0: {REPORT}")
    assert err.count("\n") == 1 and not out.exists()
