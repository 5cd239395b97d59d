"""compare_configs and run_sweep called from Python hold their output folder like the commands do:
one complete folder or nothing, and a folder another run is writing is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from schedsim.experiments import sweep as sweep_mod
from schedsim.experiments.compare import compare_configs
from schedsim.experiments.sweep import expand_grid, run_sweep
from schedsim.outputs.folder import MARKER, FolderLock, OutputFolderError
from schedsim.run.config import RunConfig

pytestmark = pytest.mark.pure_python

SMALL = RunConfig(policy="vllm", max_requests=6, seed=0)


@pytest.fixture
def fake_simulate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweep points return fixed metrics (the folder handling is what is under test)."""
    monkeypatch.setattr(sweep_mod, "simulate_one", lambda config: {"num_requests": 6, "rate": config.rate})


def test_compare_configs_writes_one_complete_folder(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    table = compare_configs([("a", SMALL), ("b", SMALL)], out=out, progress=False, plots=False)
    assert list(table["label"]) == ["a", "b"]
    assert (out / MARKER).is_file()
    assert (out / "compare.parquet").is_file() and (out / "a").is_dir() and (out / "b").is_dir()
    assert not list(tmp_path.glob(".cmp.partial-*"))  # the temporary folder was renamed into place


def test_compare_configs_leaves_the_earlier_folder_whole_when_it_fails(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    compare_configs([("a", SMALL)], out=out, progress=False, plots=False)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    bad = RunConfig(policy="vllm", max_requests=6, trace=str(tmp_path / "missing.csv"))
    with pytest.raises(Exception):  # noqa: B017 - whichever error the missing trace raises
        compare_configs([("a", SMALL), ("bad", bad)], out=out, progress=False, plots=False)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_compare_configs_refuses_a_folder_another_run_is_writing(tmp_path: Path) -> None:
    lock = FolderLock(tmp_path / "cmp")
    assert lock.acquire()
    try:
        with pytest.raises(OutputFolderError, match="being written by another schedsim run"):
            compare_configs([("a", SMALL)], out=tmp_path / "cmp", progress=False, plots=False)
    finally:
        lock.release()
    assert not (tmp_path / "cmp").exists()


def test_run_sweep_marks_its_folder_complete(tmp_path: Path, fake_simulate: None) -> None:
    out = tmp_path / "sw"
    table = run_sweep(expand_grid(SMALL, {"rate": [1, 2]}), out, workers=1, progress=False)
    assert sorted(table["rate"]) == [1, 2]
    assert (out / MARKER).is_file() and (out / "results.parquet").is_file()


def test_run_sweep_refuses_a_folder_another_run_is_writing(tmp_path: Path, fake_simulate: None) -> None:
    lock = FolderLock(tmp_path / "sw")
    assert lock.acquire()
    try:
        with pytest.raises(OutputFolderError, match="being written by another schedsim run"):
            run_sweep(expand_grid(SMALL, {"rate": [1]}), tmp_path / "sw", workers=1, progress=False)
    finally:
        lock.release()
    assert not (tmp_path / "sw" / "runs").exists()
