"""The two processes of a time-parallel run (schedsim.run.segments): fork, share idle points, splice.

The helper publishes each idle point it passes in shared memory, so neither process ever blocks
on the other while both simulate; this process stops at the first of its idle points the helper
shares, tells the helper where, and joins its own rows before the split to the helper's after it.
"""

from __future__ import annotations

import gc
import mmap
import os
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

import numpy as np

from schedsim.run.segments import IdlePoint, Merged, SplitPlan, SplitRun, idle_point, run_counters
from schedsim.run.segments_merge import Tables, head, join, tail

# At an idle point the helper has not reached yet, this process runs on (fastest: it may finish
# first); tests wait for the helper's verdict instead, so that whether a run splits is fixed.
WAIT_FOR_HELPER = False


class HelperFailed(RuntimeError):
    """The helper process died or raised: the caller reruns serially."""


class _Board:
    """Shared memory where the helper publishes its idle points as it runs (no blocking)."""

    def __init__(self, n: int) -> None:
        self.buf = mmap.mmap(-1, 8 * (n + 1) + 16 * n)  # shared with the forked helper
        self.launched = np.ndarray(n, dtype=np.int64, buffer=self.buf)
        self.progress = np.ndarray(1, dtype=np.int64, buffer=self.buf, offset=8 * n)
        self.digests = np.ndarray((n, 16), dtype=np.uint8, buffer=self.buf, offset=8 * (n + 1))
        self.launched[:] = -1
        self.progress[0] = -1

    def publish(self, pt: IdlePoint) -> None:
        """Digest first, then the step count that marks the entry valid (x86-64 keeps the order)."""
        self.digests[pt.pos] = np.frombuffer(pt.digest(), dtype=np.uint8)
        self.launched[pt.pos] = pt.launched

    def verdict(self, pt: IdlePoint) -> bool | None:
        """Did the helper idle at pt.pos in the same state? None: it has not got there yet."""
        if self.launched[pt.pos] >= 0:
            return bytes(self.digests[pt.pos]) == pt.digest()
        return False if self.progress[0] > pt.pos else None


class _ParentHook:
    """The serial run's on_idle: stops at the first idle point the helper shares."""

    def __init__(self, board: _Board, plan: SplitPlan, pid: int) -> None:
        self.board, self.plan, self.pid = board, plan, pid
        self.pending: list[IdlePoint] = []
        self.split: IdlePoint | None = None

    def __call__(self, world: Any, due: float) -> bool:
        """True (stop here) once an idle point of ours is one of the helper's."""
        if not self.plan.start <= world.inputs.pos <= self.plan.last_split:
            return False
        pt = idle_point(world, due, self.plan.safe)
        if pt is not None:
            self.pending.append(pt)
        undecided = []
        for p in self.pending:  # earliest first: a later one may be known before an earlier
            verdict = self._wait(p) if WAIT_FOR_HELPER else self.board.verdict(p)
            if verdict:
                self.split = p
                return True
            if verdict is None:
                undecided.append(p)
        self.pending = undecided
        return False

    def _wait(self, p: IdlePoint) -> bool:
        """The helper's verdict on p, waiting for it (False if the helper died first)."""
        while True:
            verdict = self.board.verdict(p)
            if verdict is not None:
                return verdict
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                self.pid = -1  # reaped here: nothing to wait for or kill later
                return False
            time.sleep(0.001)


def run_split(run: SplitRun, plan: SplitPlan, build: Callable[[int], SplitRun],
              tables: Callable[[SplitRun], Tables]) -> Merged | None:
    """Run with a helper; None when no split was found (`run` is then the whole serial run)."""
    board = _Board(plan.num_positions)
    ours, theirs = Pipe()
    gc.freeze()  # the helper's collector leaves our objects alone: fewer copy-on-write pages
    pid = os.fork()
    if pid == 0:  # the helper: never returns
        ours.close()
        _helper(theirs, board, plan, build, tables)
    gc.unfreeze()
    theirs.close()
    hook = _ParentHook(board, plan, pid)
    try:
        run.world.on_idle = hook
        run.world.run()
        if hook.split is None:
            _tell(ours, ("quit", -1))  # the helper may be gone already: nothing is lost
            return None
        if not _tell(ours, ("split", hook.split.pos)):
            raise HelperFailed("the helper process died before the split")
        mine = head(tables(run), hook.split, plan)
        msg = _receive(ours)
        return Merged(join(mine, msg[1], hook.split, msg[2], plan),
                      _counters(hook.split, msg[2], msg[3]), plan.start, hook.split)
    finally:
        ours.close()
        _reap(hook.pid)


def _tell(conn: Connection, msg: tuple[str, int]) -> bool:
    """Send the helper its answer; False if it is gone."""
    try:
        conn.send(msg)
        return True
    except OSError:
        return False


def _receive(conn: Connection) -> tuple[Any, ...]:
    """The helper's tail of the tables, or HelperFailed."""
    try:
        msg = conn.recv()
    except (EOFError, OSError) as exc:
        raise HelperFailed(f"the helper process died ({exc!r})") from None
    if msg[0] != "tables":
        raise HelperFailed(f"the helper process failed: {msg[1]}")
    return msg


def _counters(split: IdlePoint, theirs: IdlePoint, total: tuple[int, ...]) -> tuple[int, ...]:
    """run_counters() of the spliced run: ours before the split, the helper's after it."""
    return tuple(a + t - b for a, b, t in zip(split.counters, theirs.counters, total, strict=True))


def _reap(pid: int) -> None:
    """Wait for the helper (it exits once answered; killed if it is still running)."""
    if pid < 0:
        return
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _helper(conn: Connection, board: _Board, plan: SplitPlan, build: Callable[[int], SplitRun],
            tables: Callable[[SplitRun], Tables]) -> None:
    """The helper process: replay from plan.start, publish idle points, send the tail asked for."""
    code = 0
    try:
        run = build(plan.start)
        points: dict[int, IdlePoint] = {}

        def hook(world: Any, due: float) -> bool:
            pt = idle_point(world, due, plan.safe)
            if pt is not None:
                points[pt.pos] = pt
                board.publish(pt)
            board.progress[0] = world.inputs.pos
            return False

        run.world.on_idle = hook
        run.world.run()
        board.progress[0] = plan.num_positions + 1
        full = tables(run)  # built before the answer comes: it overlaps the parent's run
        kind, pos = conn.recv()
        if kind == "split":
            pt = points[pos]
            conn.send(("tables", tail(full, pt, plan), pt,
                       run_counters(run.world)))
    except BaseException:  # noqa: BLE001 (reported to the parent, which reruns serially)
        code = 1
        try:
            conn.send(("error", traceback.format_exc(limit=8)))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)
