"""`--sort` and `--skip-bad` on run/compare/sweep: the remedies the trace loader's errors name."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from schedsim.cli.errors import show_warning
from schedsim.cli.main import main
from schedsim.traces import TraceWarning

pytestmark = pytest.mark.pure_python

HEADER = "request_id,arrival_time,prompt_tokens,output_tokens\n"
QUIET = ["--no-progress", "--no-plots"]


@pytest.fixture
def unsorted(tmp_path: Path) -> Path:
    """Six requests listed latest first."""
    f = tmp_path / "unsorted.csv"
    f.write_text(HEADER + "".join(f"r{i},{(6 - i) * 0.5},32,4\n" for i in range(6)))
    return f


def test_run_suggests_sort_and_sort_reads_the_trace(
    tmp_path: Path, unsorted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    assert main(["run", "--trace", str(unsorted), "--out", str(out), *QUIET]) == 2
    assert "--sort" in capsys.readouterr().err
    assert main(["run", "--trace", str(unsorted), "--sort", "--out", str(out), *QUIET]) == 0
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["arrival_time"].is_monotonic_increasing and len(requests) == 6
    assert list(requests["request_id"]) == [f"r{i}" for i in reversed(range(6))]


def test_sort_from_a_config_file(tmp_path: Path, unsorted: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'trace = "{unsorted}"\ntrace_sort = true\n')
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "o"), *QUIET]) == 0


def test_skip_bad_drops_malformed_rows_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(HEADER + "a,0,10,5\nb,0.5,abc,5\nc,1,10,5\n")
    out = tmp_path / "o"
    assert main(["run", "--trace", str(trace), "--out", str(out), *QUIET]) == 2
    assert main(["run", "--trace", str(trace), "--skip-bad", "--out", str(out), *QUIET]) == 0
    err = capsys.readouterr().err
    assert "schedsim: warning: " in err and "skipped 1 bad row(s); first at line(s) 3" in err
    assert list(pd.read_parquet(out / "requests.parquet")["request_id"]) == ["a", "c"]


def test_compare_and_sweep_take_sort(tmp_path: Path, unsorted: Path) -> None:
    argv = ["compare", "--policies", "vllm,orca", "--trace", str(unsorted), "--sort", *QUIET]
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    sweep = ["sweep", "--grid", "max_num_seqs=2,4", "--trace", str(unsorted), "--sort", "--workers", "1"]
    assert main([*sweep, "--no-progress", "--out", str(tmp_path / "s")]) == 0


def test_skipped_rows_warning_is_a_schedsim_line() -> None:
    buf = io.StringIO()
    show_warning(TraceWarning("bad.csv: skipped 1 bad row(s)"), TraceWarning, "csvload.py", 1, file=buf)
    assert buf.getvalue() == "schedsim: warning: bad.csv: skipped 1 bad row(s)\n"
    other = io.StringIO()
    show_warning(FutureWarning("pandas says"), FutureWarning, "x.py", 7, file=other)
    assert "x.py:7: FutureWarning: pandas says" in other.getvalue()
