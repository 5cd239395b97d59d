"""Every command that writes a folder writes it whole, under a lock, after a write probe; Ctrl-C
ends a command with one line and exit status 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedsim.cli.main import main
from schedsim.experiments import compare as compare_mod
from schedsim.outputs.folder import MARKER, FolderLock

SMALL = ["--max-requests", "6", "--no-progress", "--no-plots"]
ARGS = {"run": SMALL, "compare": SMALL, "sweep": [*SMALL[:-1], "--workers", "1"]}


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_a_rerun_into_the_same_folder_keeps_nothing_of_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", "--out", str(out), "--record-itl", "--max-requests", "6", "--no-progress"]) == 0
    first = _names(out)
    assert {"itl.parquet", MARKER} <= first and any(n.endswith(".png") for n in first)
    assert main(["run", "--out", str(out), *SMALL]) == 0
    assert _names(out) == {"requests.parquet", "steps.parquet", "timeline.parquet", "summary.json"} | {
        "config.json",
        MARKER,
    }
    assert _names(tmp_path) == {"out"}  # no lock file, no temporary folder


def test_runs_without_out_get_distinct_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["run", "--policy", "trtllm:max-utilization", *SMALL]) == 0
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all((f / MARKER).is_file() for f in folders)
    assert all(f.name.startswith("trtllm-max-utilization-") and ":" not in f.name for f in folders)


def test_a_folder_being_written_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    lock = FolderLock(out)  # what a concurrent run into the same folder holds
    assert lock.acquire()
    try:
        for command in ("run", "compare", "sweep"):
            assert main([command, "--out", str(out), *ARGS[command]]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "being written by another schedsim run" in err
    finally:
        lock.release()
    assert not out.exists()


def test_an_unwritable_location_fails_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before finding the folder unwritable")

    monkeypatch.setattr("schedsim.run.simulate.simulate", no_simulation)
    monkeypatch.setattr(compare_mod, "simulate", no_simulation)
    if os.geteuid() == 0:  # root writes through file modes; sysfs refuses even root
        parent = Path("/sys")
    else:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o555)
    for command in ("run", "compare", "sweep"):
        assert main([command, "--out", str(parent / "schedsim-out"), *ARGS[command]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write to {parent}/" in err


def test_ctrl_c_in_a_run_is_one_line_and_exit_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["run", "--out", str(out), *SMALL]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("schedsim.run.simulate.simulate", interrupted)
    capsys.readouterr()
    assert main(["run", "--out", str(out), *SMALL]) == 130
    captured = capsys.readouterr()
    assert captured.err == "schedsim run: interrupted; nothing written\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier run, whole
    assert _names(tmp_path) == {"out"}


def test_ctrl_c_while_plotting_leaves_the_earlier_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["run", "--out", str(out), *SMALL]) == 0

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setenv("SCHEDSIM_PLOT_WORKER", "0")
    monkeypatch.setattr("schedsim.outputs.plots.write_run_plots", interrupted)
    assert main(["run", "--out", str(out), "--max-requests", "6", "--no-progress"]) == 130
    assert not any(p.suffix == ".png" for p in out.iterdir())  # no plot of a half-written run
    assert (out / MARKER).is_file()


def test_compare_and_sweep_folders_are_complete(tmp_path: Path) -> None:
    cmp = tmp_path / "cmp"
    assert main(["compare", "--policies", "vllm", "trtllm:max-utilization", "--out", str(cmp), *SMALL]) == 0
    assert _names(cmp) == {"compare.parquet", "vllm", "trtllm-max-utilization", MARKER}
    sweep = tmp_path / "sweep"
    assert main(["sweep", "--grid", "rate=2,4", "--workers", "1", "--out", str(sweep), *SMALL[:-1]]) == 0
    assert MARKER in _names(sweep) and "results.parquet" in _names(sweep)


def test_ctrl_c_in_a_sweep_keeps_the_finished_points_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from schedsim.experiments import sweep as sweep_mod

    calls: list[float] = []

    def third_is_interrupted(config: object) -> dict:
        calls.append(config.rate)  # type: ignore[attr-defined]
        if len(calls) == 3:
            raise KeyboardInterrupt
        return {"num_requests": 6, "p99_ttft_ms": 1.0}

    monkeypatch.setattr(sweep_mod, "simulate_one", third_is_interrupted)
    out = tmp_path / "sweep"
    argv = ["sweep", "--grid", "rate=1,2,4,8", "--workers", "1", "--out", str(out), *SMALL[:-1]]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err == f"schedsim sweep: partial sweep: 2/4 points saved in {out}/, rerun to resume\n"
    assert len(list((out / "runs").glob("*.json"))) == 2 and not (out / MARKER).exists()
    calls.clear()
    assert main(argv) == 0
    assert sorted(calls) == [4, 8]  # only the points not saved
    assert (out / MARKER).is_file()


def _default_sigint() -> None:
    """A foreground job takes Ctrl-C (a shell's background job inherits SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ctrl_c(argv: list[str], lock: Path, wait_s: float) -> tuple[int, str, float]:
    """Run `schedsim ARGV` in its own process group, press Ctrl-C (SIGINT to the group) `wait_s`
    after it took its folder's lock; (exit status, stderr, seconds from Ctrl-C to exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedsim.cli.main", *argv, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=_default_sigint,  # whatever this test's own shell ignores
    )
    try:
        deadline = time.monotonic() + 120
        while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(wait_s)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the command and its helper processes
        start = time.monotonic()
        _, err = proc.communicate(timeout=10)
        return proc.returncode, err, time.monotonic() - start
    finally:
        if proc.poll() is None:  # a command that did not stop: end it and its helpers
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.mark.skipif(sys.platform != "linux", reason="signals to a process group, Linux only")
def test_ctrl_c_stops_a_run_and_its_plot_worker_promptly(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # step by step: the whole default replay must still be running when Ctrl-C comes
    argv = ["run", "--max-requests", "100000", "--no-fast-forward", "--out", str(out)]
    rc, err, took = _ctrl_c(argv, tmp_path / ".out.lock", 2.0)
    assert (rc, err) == (130, "schedsim run: interrupted; nothing written\n") and took < 10
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary, no lock


@pytest.mark.skipif(sys.platform != "linux", reason="signals to a process group, Linux only")
def test_ctrl_c_stops_a_sweep_on_a_process_pool_promptly(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [
        "sweep",
        "--grid",
        "rate=1,2,3,4",
        "--max-requests",
        "100000",
        "--no-fast-forward",
        "--workers",
        "2",
        "--out",
        str(out),
    ]
    rc, err, took = _ctrl_c(argv, tmp_path / ".sweep.lock", 3.0)  # the pool's workers are simulating
    assert rc == 130 and took < 10
    assert err == f"schedsim sweep: partial sweep: 0/4 points saved in {out}/, rerun to resume\n"
