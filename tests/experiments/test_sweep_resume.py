"""Sweep resume keys: a point is reused only when its config, the content of every file it reads
and the schedsim version and code are unchanged; a damaged record is named and rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedsim.cli.main import main
from schedsim.experiments import sweep as sweep_mod
from schedsim.experiments.sweep import expand_grid, input_files, run_sweep
from schedsim.run.config import RunConfig

pytestmark = pytest.mark.pure_python


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[RunConfig]:
    """The configs simulated (a stand-in that records them and returns fixed metrics)."""
    seen: list[RunConfig] = []

    def fake(config: RunConfig) -> dict:
        seen.append(config)
        return {"num_requests": 4, "p99_ttft_ms": float(len(seen))}

    monkeypatch.setattr(sweep_mod, "simulate_one", fake)
    return seen


def _sweep(base: RunConfig, out: Path, notes: list[str]) -> list[float]:
    table = run_sweep(
        expand_grid(base, {"rate": [1, 2]}), out, workers=1, progress=False, notify=notes.append
    )
    return sorted(table["p99_ttft_ms"])


def test_a_changed_trace_at_the_same_path_reruns_every_point(tmp_path: Path, calls: list) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n")
    base, out, notes = RunConfig(trace=str(trace)), tmp_path / "out", []
    assert _sweep(base, out, notes) == [1.0, 2.0]
    assert _sweep(base, out, notes) == [1.0, 2.0] and len(calls) == 2 and notes == []
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,99,5\n")
    assert _sweep(base, out, notes) == [3.0, 4.0]  # new numbers, not the stale ones
    assert len(notes) == 2 and all("changed since it was recorded: trace" in n for n in notes)
    assert len(list((out / "runs").glob("*.json"))) == 2  # the superseded records are gone


def test_a_changed_calibration_or_cpu_cost_file_reruns(tmp_path: Path, calls: list) -> None:
    cal, cpu = tmp_path / "cal.json", tmp_path / "cpu.json"
    cal.write_text('{"kind": "fitted-step"}')
    cpu.write_text('{"kind": "cpu-cost"}')
    base = RunConfig(max_requests=4, latency_calibration=str(cal), cpu_cost_file=str(cpu))
    out, notes = tmp_path / "out", []
    _sweep(base, out, notes)
    cpu.write_text('{"kind": "cpu-cost", "scale": 2.0}')
    _sweep(base, out, notes)
    assert len(calls) == 4 and all("cpu_cost_file" in n and "latency_calibration" not in n for n in notes)
    cal.write_text('{"kind": "fitted-step", "model": "x"}')
    _sweep(base, out, notes)
    assert len(calls) == 6 and "latency_calibration" in notes[-1]


def test_another_schedsim_version_reruns(
    tmp_path: Path, calls: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, out, notes = RunConfig(max_requests=4), tmp_path / "out", []
    _sweep(base, out, notes)
    monkeypatch.setattr(sweep_mod, "__version__", "99.0")
    _sweep(base, out, notes)
    assert len(calls) == 4 and all("this is 99.0" in n for n in notes)


def test_an_edit_to_schedsims_code_reruns(
    tmp_path: Path, calls: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, out, notes = RunConfig(max_requests=4), tmp_path / "out", []
    _sweep(base, out, notes)
    monkeypatch.setattr(sweep_mod, "code_digest", lambda: "edited")  # same version string
    assert _sweep(base, out, notes) == [3.0, 4.0]
    assert len(notes) == 2 and all("schedsim's code or shipped data changed" in n for n in notes)


def test_the_code_digest_follows_sources_and_data_not_built_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "digestpkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "data.csv").write_text("a\n1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sweep_mod, "SCHEDSIM_PACKAGES", ("digestpkg",))

    def digest() -> str:
        sweep_mod.code_digest.cache_clear()
        return sweep_mod.code_digest()

    first = digest()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"built")
    assert digest() == first  # built files do not count
    (pkg / "data.csv").write_text("a\n2\n")
    second = digest()
    assert second != first  # shipped data counts
    (pkg / "__init__.py").write_text("x = 2\n")
    assert digest() not in (first, second)  # code counts
    sweep_mod.code_digest.cache_clear()


def test_a_damaged_record_is_named_and_rerun(tmp_path: Path, calls: list) -> None:
    base, out, notes = RunConfig(max_requests=4), tmp_path / "out", []
    _sweep(base, out, notes)
    record = sorted((out / "runs").glob("*.json"))[0]
    record.write_text('{"run_id": "trunc')
    assert _sweep(base, out, notes) != []
    assert len(calls) == 3  # only the damaged point
    assert len(notes) == 1 and str(record) in notes[0] and "damaged record" in notes[0]


def test_a_record_under_another_points_name_is_rerun(tmp_path: Path, calls: list) -> None:
    base, out, notes = RunConfig(max_requests=4), tmp_path / "out", []
    _sweep(base, out, notes)
    first, second = sorted((out / "runs").glob("*.json"))
    first.write_text(second.read_text())  # a copy under the wrong name
    _sweep(base, out, notes)
    assert len(calls) == 3 and "does not hash to its name" in notes[0]


def test_input_files_cover_trace_calibrations_and_shipped_samples(tmp_path: Path) -> None:
    profiles = tmp_path / "cal_profiles"
    profiles.mkdir()
    (profiles / "compute.csv.gz").write_bytes(b"x")
    cal = tmp_path / "cal.json"
    cal.write_text('{"kind": "roofline-fit", "profiles": "cal_profiles"}')
    files = input_files(RunConfig(latency_calibration=str(cal), cpu_cost_file=str(tmp_path / "c.json")))
    assert set(files) == {"trace", "latency_calibration", "profiles compute.csv.gz", "cpu_cost_file"}
    assert files["trace"].is_file()  # the shipped sample's own file
    assert "trace" not in input_files(RunConfig(trace="gen:rate=2,requests=10"))


def test_the_cli_names_a_damaged_record(tmp_path: Path, calls: list, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    argv = ["sweep", "--grid", "rate=1,2", "--max-requests", "4", "--workers", "1", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    record = sorted((out / "runs").glob("*.json"))[0]
    record.write_text("not json")
    assert main([*argv, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"schedsim sweep: {record}: damaged record" in err and "Traceback" not in err


def test_a_record_without_a_resume_key_is_rerun(tmp_path: Path, calls: list) -> None:
    base, out, notes = RunConfig(max_requests=4), tmp_path / "out", []
    runs = expand_grid(base, {"rate": [1]})
    (out / "runs").mkdir(parents=True)
    old = out / "runs" / f"{runs[0].run_id}.json"  # keyed by the config alone
    old.write_text(json.dumps({"run_id": runs[0].run_id, "params": {"rate": 1}, "config": {}, "metrics": {}}))
    run_sweep(runs, out, workers=1, progress=False, notify=notes.append)
    assert len(calls) == 1 and notes == [
        f"{old}: a record without a resume key (an older schedsim's); rerunning that point"
    ]
