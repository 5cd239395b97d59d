"""`schedsim run/compare/sweep` end to end on small samples of the shipped default trace."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from schedsim.cli.main import main
from schedsim.outputs.figures import PLOT_FILES
from schedsim.outputs.files import JSON_FILES, TABLE_FILES
from schedsim.run.result import REQUEST_COLUMNS, STEP_COLUMNS, TIMELINE_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REQUIRED_SUMMARY = [
    "num_requests",
    "num_finished",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "num_preemptions",
    "recomputed_tokens",
    "num_steps",
    "sim_wall_s",
] + [f"{stat}_{m}_ms" for stat in ("mean", "median", "p99") for m in ("ttft", "tpot", "itl", "e2el")]


def _png_ok(path: Path) -> bool:
    """A real, non-trivial PNG."""
    return path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(["run", "--max-requests", "50", "--out", str(out), "--no-progress"]) == 0
    return out


def test_run_writes_every_file(run_dir: Path) -> None:
    for name in TABLE_FILES + JSON_FILES + PLOT_FILES:
        assert (run_dir / name).is_file(), name
    for name in PLOT_FILES:
        assert _png_ok(run_dir / name), name


def test_run_tables_follow_the_documented_schema(run_dir: Path) -> None:
    requests = pd.read_parquet(run_dir / "requests.parquet")
    steps = pd.read_parquet(run_dir / "steps.parquet")
    timeline = pd.read_parquet(run_dir / "timeline.parquet")
    assert set(REQUEST_COLUMNS) <= set(requests.columns) and len(requests) == 50
    assert set(STEP_COLUMNS) <= set(steps.columns) and len(steps) > 0
    assert set(TIMELINE_COLUMNS) <= set(timeline.columns)
    assert set(timeline["resource"]) == {"cpu", "gpu"}


def test_tables_keep_their_dtypes_and_code_only_the_labels(run_dir: Path) -> None:
    import pyarrow.parquet as pq

    timeline = pd.read_parquet(run_dir / "timeline.parquet")
    assert isinstance(timeline["kind"].dtype, pd.CategoricalDtype)
    assert str(timeline["step"].dtype) == "int32" and str(timeline["start"].dtype) == "float64"
    meta = pq.ParquetFile(run_dir / "timeline.parquet").metadata.row_group(0)
    encodings = {meta.column(j).path_in_schema: meta.column(j).encodings for j in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["kind"])  # labels: small codes
    assert not any("DICTIONARY" in e for e in encodings["start"])  # numbers: plain


def test_summary_has_required_keys_and_defaults(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    missing = [k for k in REQUIRED_SUMMARY if k not in summary]
    assert not missing
    assert summary["num_requests"] == 50 and summary["num_finished"] == 50
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert summary["num_steps"] + summary.get("num_empty_steps", 0) == len(steps)
    assert 0.0 <= summary["gpu_idle_fraction"] <= 1.0
    config = json.loads((run_dir / "config.json").read_text())
    # the embedded default: Azure conversation trace, vllm-async, Llama-3.1-8B on H100
    assert (config["trace"], config["policy"], config["model"], config["gpu"]) == (
        "azure-conv-2023",
        "vllm-async",
        "llama-3.1-8b",
        "h100-sxm",
    )
    assert isinstance(config["num_gpu_blocks"], int)  # resolved, not None


def test_run_prints_a_summary_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cfg.toml"
    f.write_text('policy = "vllm"\nmax_requests = 12\nseed = 3\n')
    out = tmp_path / "o"
    assert (
        main(["run", "--config", str(f), "--seed", "4", "--out", str(out), "--no-progress", "--no-plots"])
        == 0
    )
    text = capsys.readouterr().out
    assert "p99_ttft_ms" in text and "num_requests" in text
    config = json.loads((out / "config.json").read_text())
    assert (config["policy"], config["max_requests"], config["seed"]) == ("vllm", 12, 4)
    assert not list(out.glob("*.png"))


def test_compare_two_policies_same_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    variant = tmp_path / "small-budget.toml"
    variant.write_text('policy = "vllm"\nmax_num_batched_tokens = 512\n')
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--policies",
                "vllm,vllm-async",
                "--variant",
                str(variant),
                "--max-requests",
                "30",
                "--slo-ttft-ms",
                "200",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    table = pd.read_parquet(out / "compare.parquet")
    assert list(table["label"]) == ["vllm", "vllm-async", "small-budget"]
    for metric in (
        "p99_ttft_ms",
        "mean_hol_blocking_ms",
        "preemption_rate",
        "recomputed_tokens",
        "gpu_idle_fraction",
        "cpu_hidden_fraction",
        "request_goodput",
    ):
        assert metric in table.columns and metric in text
    assert set(table["num_requests"]) == {30}
    # same workload and seed: every variant delivers the same tokens to the same requests
    tokens = [
        pd.read_parquet(out / label / "requests.parquet").set_index("request_id")["num_output_tokens"]
        for label in table["label"]
    ]
    for other in tokens[1:]:
        pd.testing.assert_series_equal(tokens[0], other)
    for name in ("cdf_latency.png", "over_time.png"):
        assert _png_ok(out / name)


def test_compare_rejects_duplicate_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--policies", "vllm", "vllm", "--max-requests", "5", "--out", str(tmp_path)]) == 2
    assert "duplicate" in capsys.readouterr().err


def test_run_on_the_real_backend_writes_the_same_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from schedsim.traces import write_workload

    trace = write_workload(
        pd.DataFrame(
            {
                "request_id": [f"q{i}" for i in range(6)],
                "arrival_time": [0.01 * i for i in range(6)],
                "prompt_tokens": [9 + 5 * i for i in range(6)],
                "output_tokens": [3 + i % 3 for i in range(6)],
            }
        ),
        tmp_path / "tiny.csv",
    )
    out = tmp_path / "real"
    assert (
        main(
            [
                "run",
                "--backend",
                "real",
                "--real-model",
                "tiny",
                "--trace",
                str(trace),
                "--policy",
                "vllm-async",
                "--block-size",
                "4",
                "--num-gpu-blocks",
                "128",
                "--max-model-len",
                "128",
                "--max-num-batched-tokens",
                "32",
                "--max-num-seqs",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    for name in TABLE_FILES + JSON_FILES + PLOT_FILES:
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "real" and summary["num_finished"] == 6
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["num_output_tokens"].tolist() == [3 + i % 3 for i in range(6)]


def test_validate_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from schedsim.traces import write_workload

    trace = write_workload(
        pd.DataFrame(
            {
                "request_id": ["a", "b", "c"],
                "arrival_time": [0.0, 0.01, 0.02],
                "prompt_tokens": [9, 20, 14],
                "output_tokens": [3, 4, 2],
            }
        ),
        tmp_path / "t.csv",
    )
    out = tmp_path / "val"
    assert (
        main(
            [
                "validate",
                "--repeats",
                "2",
                "--real-model",
                "tiny",
                "--trace",
                str(trace),
                "--policy",
                "vllm",
                "--num-gpu-blocks",
                "256",
                "--max-model-len",
                "128",
                "--max-num-batched-tokens",
                "64",
                "--max-num-seqs",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    report = json.loads((out / "validation.json").read_text())
    summary = report["summary"]
    assert summary["num_requests"] == 3 and summary["same_output_lengths"]
    assert summary["step_median_rel_err"] >= 0 and isinstance(summary["measurements_too_noisy"], bool)
    assert "interleaved repeats" in summary["step_timing"] and summary["noise_verdict"]
    assert len(pd.read_parquet(out / "calibration_steps.parquet")) == summary["calibration_shapes"]
    captured = capsys.readouterr()
    assert "real-backend workload: 3 requests of" in captured.err and "noise_verdict" in captured.out
    assert len(pd.read_parquet(out / "steps_compared.parquet")) == report["summary"]["num_steps"]
    assert _png_ok(out / "validation.png")
    for world in ("real", "sim"):
        assert len(pd.read_parquet(out / world / "requests.parquet")) == 3
