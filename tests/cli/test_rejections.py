"""A run that rejects requests says so: a warning with the count and the reason (red only on a
terminal), an error with exit 3 under --strict."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from schedsim.cli.exit_codes import EXIT_STRICT
from schedsim.cli.main import main
from schedsim.cli.rejections import report_rejections
from schedsim.run.rejections import Rejections

pytestmark = pytest.mark.pure_python

SHORT = ["--max-requests", "20", "--max-model-len", "256", "--no-progress", "--no-plots"]


def test_run_warns_with_count_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["run", *SHORT, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    rejected = json.loads((out / "summary.json").read_text())["num_rejected"]
    assert rejected > 0
    line = f"schedsim: warning: {rejected} of 20 requests rejected"
    assert line in captured.err and "max_model_len=256" in captured.err and "--max-model-len" in captured.err
    assert "\033[" not in captured.err  # not a terminal: no colour codes
    assert "num_rejected" in captured.out  # the count is in the printed summary too


def test_strict_makes_rejections_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["run", *SHORT, "--out", str(out), "--strict"]) == EXIT_STRICT
    err = capsys.readouterr().err
    assert err.startswith("schedsim: error: ") and "requests rejected" in err
    assert (out / "requests.parquet").exists()  # the outputs are there to inspect


def test_no_rejections_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--max-requests", "5", "--no-progress", "--no-plots", "--out", str(tmp_path / "o")]
    assert main([*argv, "--strict"]) == 0
    assert "rejected" not in capsys.readouterr().err


def test_compare_names_each_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--policies", "vllm,sglang-overlap", *SHORT, "--out", str(tmp_path / "c"), "--strict"]
    assert main(argv) == EXIT_STRICT
    err = capsys.readouterr().err
    assert "variant 'vllm': " in err and "variant 'sglang-overlap': " in err


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_red_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [(None, Rejections(3, 10, 512))]
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert report_rejections(found, strict=False) == 0
    assert term.getvalue().startswith("\033[31mschedsim: warning: 3 of 10 requests rejected")
    assert term.getvalue().rstrip("\n").endswith("\033[0m")
    plain = _Terminal()
    monkeypatch.setattr(sys, "stderr", plain)
    monkeypatch.setenv("NO_COLOR", "1")
    report_rejections(found, strict=False)
    assert plain.getvalue().startswith("schedsim: warning: 3 of 10")


@pytest.mark.parametrize("policy", ["sarathi", "orca", "static"])
def test_requests_larger_than_the_kv_pool_are_rejected_not_fatal(
    policy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    pool = ["--num-gpu-blocks", "40", "--block-size", "16", "--max-model-len", "4096"]
    assert (
        main(
            [
                "run",
                "--policy",
                policy,
                "--max-requests",
                "20",
                *pool,
                "--no-progress",
                "--no-plots",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    err = capsys.readouterr().err
    assert summary["num_rejected_kv"] > 0
    assert summary["num_finished"] + summary["num_rejected"] + summary["num_aborted"] == 20
    kv = summary["num_rejected_kv"]
    assert f"{kv} need more KV blocks than the whole pool holds" in err and "--num-gpu-blocks" in err


def test_the_message_names_both_reasons() -> None:
    text = Rejections(5, 10, 512, kv_pool=2).message()
    assert text.startswith("5 of 10 requests rejected: 3 leave no room") and "2 need more KV blocks" in text


def test_sglang_aborts_prompts_longer_than_its_pool_as_sglang_does(tmp_path: Path) -> None:
    out = tmp_path / "o"
    pool = ["--num-gpu-blocks", "40", "--block-size", "16", "--max-model-len", "4096"]
    argv = ["run", "--policy", "sglang-overlap", "--max-requests", "20", *pool, "--no-progress", "--no-plots"]
    assert main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_aborted"] > 0 and summary["num_rejected"] == 0  # validate_input_length
    assert summary["num_finished"] + summary["num_aborted"] == 20


def test_a_run_cut_by_max_sim_time_warns_of_its_unfinished_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = [
        "run",
        "--max-requests",
        "200",
        "--max-sim-time",
        "1",
        "--no-progress",
        "--no-plots",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_unfinished"] > 0
    line = f"schedsim: warning: {summary['num_unfinished']:,} of 200 requests unfinished when the run ended"
    assert line in err and "--max-sim-time" in err
    argv = ["compare", "--policies", "vllm,sarathi", "--max-requests", "200", "--max-sim-time", "1"]
    assert main([*argv, "--no-progress", "--no-plots", "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "variant 'vllm': " in err and "variant 'sarathi': " in err and err.count("unfinished when") == 2
