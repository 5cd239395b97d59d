"""Output folders: one complete run or none, never two at once, unwritable found before the run."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from schedsim.outputs.folder import (
    MARKER,
    FolderLock,
    OutputFolder,
    OutputFolderError,
    WorkingFolder,
    default_out,
    slug,
)

pytestmark = pytest.mark.pure_python


def _write(folder: OutputFolder, files: dict[str, str]) -> Path:
    with folder as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)
    return folder.final


def test_the_folder_appears_whole_with_its_marker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with OutputFolder(out) as tmp:
        (tmp / "summary.json").write_text("{}")
        assert not out.exists()  # nothing under the final name until every file is written
        assert tmp.parent == out.parent and tmp.name.startswith(".run.partial-")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no lock, no temporary left


def test_a_rerun_leaves_no_file_of_the_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _write(OutputFolder(out), {"itl.parquet": "old", "latency.png": "old", "summary.json": "old"})
    _write(OutputFolder(out), {"summary.json": "new"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "summary.json"]
    assert (out / "summary.json").read_text() == "new"


def test_an_interrupted_run_leaves_the_earlier_run_untouched(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _write(OutputFolder(out), {"summary.json": "old"})
    with pytest.raises(KeyboardInterrupt), OutputFolder(out) as tmp:
        (tmp / "summary.json").write_text("half")
        raise KeyboardInterrupt
    assert (out / "summary.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with OutputFolder(out):
        with pytest.raises(OutputFolderError, match="being written by another schedsim run") as err:
            OutputFolder(out).__enter__()
        assert str(os.getpid()) in str(err.value)
    _write(OutputFolder(out), {"summary.json": "after"})  # the lock is gone with its holder


def test_default_folders_are_distinct_and_have_no_colon(tmp_path: Path) -> None:
    first = OutputFolder(default_out("trtllm:max-utilization", tmp_path), fresh=True)
    second = OutputFolder(default_out("trtllm:max-utilization", tmp_path), fresh=True)
    with first, second:  # the same second: the second takes the next free name
        pass
    assert first.final != second.final
    for folder in (first.final, second.final):
        assert folder.is_dir() and ":" not in folder.name
        assert folder.name.startswith("trtllm-max-utilization-")
    assert slug("a/b:c d") == "a-b-c-d"


def test_a_folder_of_other_files_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(OutputFolderError, match="files schedsim did not write"):
        _write(OutputFolder(out), {"summary.json": "{}"})
    assert (out / "notes.txt").read_text() == "keep me"


def test_the_current_folder_or_one_above_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for out in (".", "..", str(tmp_path / "work")):
        with pytest.raises(OutputFolderError, match="the current folder or one above it"):
            OutputFolder(out).__enter__()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_a_full_disk_is_found_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputFolderError, match="the disk is full"):
        OutputFolder(tmp_path / "run").__enter__()
    assert list(tmp_path.iterdir()) == []  # no temporary folder, no lock left behind


def test_a_read_only_location_is_found_before_the_run(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through file modes; sysfs refuses even root
        parent = Path("/sys")
    else:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o555)
    with pytest.raises(OutputFolderError, match=f"cannot write to {parent}/"):
        OutputFolder(parent / "schedsim-run").__enter__()


def test_stale_temporaries_of_a_killed_run_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".run.partial-abc").mkdir()
    (tmp_path / ".run.partial-abc" / "steps.parquet").write_text("half")
    _write(OutputFolder(tmp_path / "run"), {"summary.json": "{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_lock_file_left_by_a_dead_holder_does_not_block(tmp_path: Path) -> None:
    (tmp_path / ".run.lock").write_text("12345\n")  # no process holds its flock
    lock = FolderLock(tmp_path / "run")
    assert lock.acquire()
    lock.release()
    assert not (tmp_path / ".run.lock").exists()


def test_a_working_folder_keeps_its_records_and_drops_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "abc.json").write_text("{}")
    (out / "sweep_p99_ttft_ms_vs_rate.png").write_text("old plot")
    (out / MARKER).write_text("done")
    folder = WorkingFolder(out, keep=("runs",))
    with folder as work:
        assert sorted(p.name for p in work.iterdir()) == ["runs"]  # unfinished: no marker
        with pytest.raises(OutputFolderError, match="being written"):
            WorkingFolder(out).__enter__()
        folder.complete()
    assert (out / MARKER).is_file() and (out / "runs" / "abc.json").is_file()
