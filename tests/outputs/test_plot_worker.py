"""The plot worker: the same PNGs as rendering in the parent, and a dead worker falls back."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from schedsim import RunConfig, simulate
from schedsim.outputs.figures import PLOT_FILES, RUN_PLOTS, WORKER_COLUMNS
from schedsim.outputs.files import write_run
from schedsim.outputs.plot_worker import PlotWorker, start_plot_worker
from schedsim.run.result import STEP_COLUMNS, TIMELINE_COLUMNS


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    return simulate(RunConfig(max_requests=40))


def _pngs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in PLOT_FILES}


def test_worker_figures_are_byte_identical_to_the_parents(result, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_run(result, tmp_path / "inline")
    with PlotWorker() as worker:
        write_run(result, tmp_path / "worker", worker=worker)
    inline, remote = _pngs(tmp_path / "inline"), _pngs(tmp_path / "worker")
    assert set(remote) == set(PLOT_FILES)
    for name in PLOT_FILES:
        assert remote[name] == inline[name], name


def test_a_dead_worker_leaves_the_figures_to_the_parent(result, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_run(result, tmp_path / "inline")
    worker = PlotWorker()
    try:
        os.kill(worker._started.result(timeout=60), signal.SIGKILL)
        write_run(result, tmp_path / "dead", worker=worker)
        assert worker.render("batch_kv.png", "plot_batch_and_kv", result.steps, tmp_path / "x.png") is None
    finally:
        worker.close()
    assert _pngs(tmp_path / "dead") == _pngs(tmp_path / "inline")


def test_worker_ships_only_documented_columns() -> None:
    tables = {"steps": STEP_COLUMNS, "timeline": TIMELINE_COLUMNS}
    assert set(WORKER_COLUMNS) < set(PLOT_FILES)
    for name, _, table in RUN_PLOTS:
        if name in WORKER_COLUMNS:
            assert set(WORKER_COLUMNS[name]) <= set(tables[table]), name


def test_no_worker_without_plots_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert start_plot_worker(False) is None
    monkeypatch.setenv("SCHEDSIM_PLOT_WORKER", "0")
    assert start_plot_worker(True) is None
