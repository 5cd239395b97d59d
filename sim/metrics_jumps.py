"""A fast-forward jump's steps and timeline rows, kept compact until the tables are built.

A jump of k iterations writes k steps rows and ~5k timeline intervals that are functions of its
iteration times (StretchTimes), its phase costs and its batch. Writing them row by row costs
more than the rest of the jump; instead the recorder keeps, per jump, where its rows go (its
position in each timeline stream and its first step), its costs and batch, and its times
(a column per field, 10 floats an iteration), and the table builders expand every jump at once with
numpy: `fill_jump_steps` (the jump reserved its steps rows, zeros until then) and
`jump_timeline_rows` (merged into the streams at their positions, in append order).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from .buffers import Column

FIELDS: Final = ("poll", "sched", "ready", "start", "end", "gpu", "wait", "d2h", "update", "kv_usage")
META: Final = ("cpu_pos", "gpu_pos", "idx0", "k", "lag", "n", "n_last")
COSTS: Final = ("s", "p", "d0", "u0", "d", "u", "s_last", "p_last")


class JumpChunks:
    """Every jump's compact record (see the module docstring)."""

    def __init__(self) -> None:
        self.times = [Column("d") for _ in FIELDS]  # per field, every jump's k values in order
        self.meta = Column("q")  # per jump: META
        self.costs = Column("d")  # per jump: COSTS

    def add(self, meta: list[Any], costs: list[Any], fields: list[list[Any]]) -> None:
        """One jump: its META and COSTS values and its FIELDS lists (k values each)."""
        times = self.times
        for j in range(len(times)):  # (compiled, an indexed loop beats zip(strict=True))
            times[j].extend(fields[j])
        self.meta.extend(meta)
        self.costs.extend(costs)

    def __len__(self) -> int:
        return len(self.meta) // len(META)


def _iterations(ch: JumpChunks) -> dict[str, np.ndarray]:
    """Per iteration of every jump, in order: each field, its step and its jump's values."""
    meta = np.frombuffer(ch.meta.array(), dtype=np.int64).reshape(-1, len(META))
    costs = np.frombuffer(ch.costs.array(), dtype=np.float64).reshape(-1, len(COSTS))
    k = meta[:, 3]
    out: dict[str, np.ndarray] = {f: np.frombuffer(col.array(), dtype=np.float64)
                                  for f, col in zip(FIELDS, ch.times, strict=True)}
    total = int(k.sum())
    first_it = np.cumsum(k) - k  # each jump's first iteration
    i = np.arange(total) - np.repeat(first_it, k)  # index within its jump
    kk = np.repeat(k, k)
    out["step"] = np.repeat(meta[:, 2], k) + i
    out["lag"] = np.repeat(meta[:, 4], k)
    out["first"], out["last"] = i == 0, i == kk - 1
    out["n"], out["n_last"] = np.repeat(meta[:, 5], k), np.repeat(meta[:, 6], k)
    for j, c in enumerate(COSTS):
        out[c] = np.repeat(costs[:, j], k)
    out["jump"] = np.repeat(np.arange(len(k)), k)
    out["cpu_pos"], out["gpu_pos"], out["first_it"] = meta[:, 0], meta[:, 1], first_it
    return out


def fill_jump_steps(ch: JumpChunks, cols: dict[str, np.ndarray]) -> None:
    """Write every jump's steps rows into the steps table's columns (arrays indexed by step)."""
    if not len(ch):
        return
    it = _iterations(ch)
    rows = it["step"]
    for name, field in (("schedule_time", "sched"), ("start", "start"), ("end", "end"),
                        ("gpu_time", "gpu"), ("kv_usage", "kv_usage")):
        cols[name][rows] = it[field]
    cols["num_running"][rows] = it["n"]
    batch = np.where(it["last"], it["n_last"], it["n"])  # the last schedule may leave some out
    cols["num_decode_reqs"][rows] = batch
    cols["num_decode_tokens"][rows] = batch


def jump_timeline_rows(ch: JumpChunks, kinds: tuple[int, int, int, int]
                       ) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
    """The jumps' CPU rows (kind, start, end, step) and GPU rows (start, end, step), each with the
    position of its jump's rows in its stream (the number of other rows appended before them)."""
    it = _iterations(ch)
    before = it["step"] - it["lag"]  # d2h and update belong to the step before under a queue
    cost = (np.where(it["last"], it["s_last"], it["s"]), np.where(it["last"], it["p_last"], it["p"]),
            np.where(it["first"], it["d0"], it["d"]), np.where(it["first"], it["u0"], it["u"]))
    keep = np.stack([c > 0 for c in cost], axis=1)  # phases of cost 0 are not recorded
    cand = (np.broadcast_to(np.array(kinds, dtype=np.int8), keep.shape),
            np.stack([it["poll"], it["sched"], it["wait"], it["d2h"]], axis=1),
            np.stack([it["sched"], it["ready"], it["d2h"], it["update"]], axis=1),
            np.stack([it["step"], it["step"], before, before], axis=1))
    cpu = [c[keep] for c in cand]  # iteration-major, phase order within an iteration
    gkeep = it["gpu"] > 0
    gpu = [it["start"][gkeep], it["end"][gkeep], it["step"][gkeep]]
    jump, njumps = it["jump"], len(it["cpu_pos"])
    cpu_at = np.repeat(it["cpu_pos"], np.add.reduceat(keep.sum(axis=1), it["first_it"]))  # k >= 1
    gpu_at = np.repeat(it["gpu_pos"], np.bincount(jump[gkeep], minlength=njumps))
    return cpu, cpu_at, gpu, gpu_at


def merge_at(stream: list[np.ndarray], rows: list[np.ndarray], at: np.ndarray) -> list[np.ndarray]:
    """A stream's columns with `rows` inserted, row i before the stream's row at[i] (at is
    non-decreasing; rows keep their order, and come after the stream's rows before at[i])."""
    n, m = len(stream[0]), len(at)
    if not m:
        return stream
    pos_rows = at + np.arange(m)  # final index of inserted row i
    is_row = np.zeros(n + m, dtype=bool)
    is_row[pos_rows] = True
    out = []
    for col, add in zip(stream, rows, strict=True):
        merged = np.empty(n + m, dtype=np.result_type(col.dtype, add.dtype))
        merged[~is_row] = col
        merged[is_row] = add
        out.append(merged.astype(col.dtype, copy=False))
    return out
