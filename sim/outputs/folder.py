"""An output folder that always holds one complete run.

A run writes into a temporary sibling folder (`.NAME.partial-XXXX`) and renames it into place
once every file is written, so `NAME/` is either absent, the previous complete run, or this
complete run: never a mix, never a half-written folder. A lock file beside it (`.NAME.lock`,
an exclusive `flock`) keeps a second run from writing the same folder at the same time; the
temporary folder doubles as a write probe, so a read-only or full location fails before the
simulation starts. Folders left by a run that was killed outright are removed by the next run
that takes the lock.

A sweep's folder is a resumable store instead (`WorkingFolder`): it is written in place, under
the same lock and probe, and carries the `COMPLETE` marker only once every point is in.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType

MARKER = "COMPLETE"  # written last inside the folder: what a finished run looks like
OUTPUT_SUFFIXES = (".parquet", ".json", ".png", ".jsonl")  # files a schedsim folder holds
PROBE_BYTES = 1 << 20  # the write probe: a full disk fails here, not after the simulation
TEMP_FILE = re.compile(r"^\..+\.tmp-\d+$")  # write_atomic's temporary (a run killed mid-write)


class OutputFolderError(Exception):
    """An output folder that cannot be written; the message names the folder and why."""


def slug(name: str) -> str:
    """A folder name from a label: only letters, digits, '.', '_' and '-' (no ':' or '/')."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return out or "run"


def default_out(kind: str, root: Path = Path("runs")) -> Path:
    """`runs/<kind>-<YYYYmmdd-HHMMSS>`: a fresh folder per run when no --out is given."""
    return root / f"{slug(kind)}-{time.strftime('%Y%m%d-%H%M%S')}"


def chosen_out(out: Path | None, kind: str) -> tuple[Path, bool]:
    """(folder, fresh): the --out given, or a fresh default folder named after `kind`."""
    return (Path(out), False) if out is not None else (default_out(kind), True)


def is_output_folder(path: Path) -> bool:
    """Whether a folder holds only what schedsim writes (so replacing it loses nothing else)."""
    if (path / MARKER).is_file():
        return True
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            if not is_output_folder(entry):
                return False
        elif entry.suffix not in OUTPUT_SUFFIXES and not TEMP_FILE.match(entry.name):
            return False
    return True


class FolderLock:
    """An exclusive, non-blocking `flock` on `.NAME.lock` beside the folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder.parent / f".{folder.name}.lock"
        self.fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock; False when another process holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:  # the holder before us may have removed the file: lock the one on disk
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self.fd = fd
                return True
            os.close(fd)

    def holder(self) -> str:
        """The pid written by the process holding the lock (or '?')."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Remove the lock file and let go."""
        if self.fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None


def claim(requested: Path, fresh: bool = False) -> tuple[Path, FolderLock]:
    """The folder to write and its lock; refuses a folder another run is writing.

    `fresh=True` (a default folder name) takes the first free name of `out`, `out-2`, `out-3`...
    """
    here = Path.cwd().resolve()
    if requested.resolve() in (here, *here.parents):
        raise OutputFolderError(
            f"{requested} is the current folder or one above it, which a run would replace; "
            "choose a folder of its own for --out"
        )
    try:
        requested.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputFolderError(f"cannot create {requested.parent}/: {exc.strerror or exc}") from None
    for n in range(1, 1000):
        out = requested if n == 1 else requested.with_name(f"{requested.name}-{n}")
        lock = FolderLock(out)
        try:
            taken = lock.acquire()
        except OSError as exc:
            raise OutputFolderError(f"cannot write to {out.parent}/: {exc.strerror or exc}") from None
        if fresh and (not taken or out.exists()):
            if taken:
                lock.release()
            continue
        if not taken:
            raise OutputFolderError(
                f"{out}/ is being written by another schedsim run (pid {lock.holder()}, "
                f"lock {lock.path}); wait for it or choose another --out"
            )
        return out, lock
    raise OutputFolderError(f"no free folder name next to {requested}/")


def check_replaceable(out: Path) -> None:
    """An existing `out` is replaced only if it is a schedsim output folder (or empty)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputFolderError(f"{out} exists and is not a folder; choose another --out")
    if not is_output_folder(out):
        raise OutputFolderError(
            f"{out}/ holds files schedsim did not write; choose another --out or empty it "
            "(schedsim replaces only its own output folders)"
        )


def write_marker(folder: Path) -> None:
    """The `COMPLETE` marker: when and by which process the folder was finished."""
    (folder / MARKER).write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")


class OutputFolder:
    """`with OutputFolder(out) as tmp:` write into `tmp`; on success it becomes `out`, whole.

    On an exception (Ctrl-C included) the temporary folder is removed and `out` is untouched.
    `fresh=True` picks a free name (see `claim`); `final` is the folder written.
    """

    def __init__(self, out: Path | str, fresh: bool = False) -> None:
        self.requested = Path(out)
        self.fresh = fresh
        self.final = self.requested
        self.tmp: Path | None = None
        self.lock: FolderLock | None = None

    def __enter__(self) -> Path:
        self.final, self.lock = claim(self.requested, self.fresh)
        try:
            check_replaceable(self.final)
            self._remove_stale()
            self.tmp = self._probe()
        except BaseException:
            self.lock.release()
            raise
        return self.tmp

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.tmp is not None and self.lock is not None
        try:
            if kind is None:
                write_marker(self.tmp)
                self._replace()
        finally:
            if self.tmp.exists():
                shutil.rmtree(self.tmp, ignore_errors=True)
            self.lock.release()

    def _remove_stale(self) -> None:
        """Temporary folders of runs that were killed outright (we hold the lock: none is live)."""
        for pattern in (f".{self.final.name}.partial-*", f".{self.final.name}.old-*"):
            for path in self.final.parent.glob(pattern):
                shutil.rmtree(path, ignore_errors=True)

    def _probe(self) -> Path:
        """Create the temporary folder and write a probe file: read-only or full fails now."""
        parent = self.final.parent
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.partial-", dir=parent))
        except OSError as exc:
            raise OutputFolderError(f"cannot write to {parent}/: {exc.strerror or exc}") from None
        os.chmod(tmp, 0o777 & ~_umask())  # the folder a plain mkdir would make
        try:
            probe_writable(tmp, parent)
        except OutputFolderError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _replace(self) -> None:
        """Rename the finished folder into place (the earlier run, if any, goes as a whole)."""
        assert self.tmp is not None
        out = self.final
        if not out.exists():
            os.rename(self.tmp, out)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / out.name)
        os.rename(self.tmp, out)
        shutil.rmtree(old, ignore_errors=True)


class WorkingFolder:
    """`with WorkingFolder(out, keep=("runs",)) as folder:` a folder written in place (a sweep's
    resumable store) under the same lock and write probe as `OutputFolder`.

    On entry every entry of an earlier run except those named in `keep` is removed, the
    `COMPLETE` marker first; `complete()` writes it back once every file is in.
    """

    def __init__(self, out: Path | str, fresh: bool = False, keep: tuple[str, ...] = ()) -> None:
        self.requested = Path(out)
        self.fresh = fresh
        self.keep = keep
        self.final = self.requested
        self.lock: FolderLock | None = None

    def __enter__(self) -> Path:
        self.final, self.lock = claim(self.requested, self.fresh)
        try:
            check_replaceable(self.final)
            try:
                self.final.mkdir(exist_ok=True)
            except OSError as exc:
                raise OutputFolderError(f"cannot create {self.final}/: {exc.strerror or exc}") from None
            probe_writable(self.final)
            (self.final / MARKER).unlink(missing_ok=True)
            for entry in self.final.iterdir():
                if entry.name in self.keep:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        except BaseException:
            self.lock.release()
            raise
        return self.final

    def complete(self) -> None:
        """Mark the folder finished."""
        write_marker(self.final)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.lock is not None
        self.lock.release()


def probe_writable(folder: Path, shown: Path | None = None) -> None:
    """Write and remove a 1 MiB file in `folder`: a read-only or full location fails here."""
    probe = folder / f".probe-{os.getpid()}"
    try:
        with probe.open("wb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
        why = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
        raise OutputFolderError(f"cannot write to {shown or folder}/: {why}") from None


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary sibling and a rename (readers never see half of it)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
