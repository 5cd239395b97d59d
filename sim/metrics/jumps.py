"""A fast-forward jump's steps and timeline rows, kept compact until the tables are built.

A jump of k iterations writes k steps rows and ~5k timeline intervals that are functions of its
iteration times (StretchTimes), its phase costs and its batch. Writing them row by row costs
more than the rest of the jump; instead the recorder keeps, per jump, where its rows go (its
position in each timeline stream and its first step), its costs, batch and first poll, and the
times the others follow from, with its KV usage and waiting count (a column per field, 5 floats
an iteration); the table builders
expand the jumps with numpy, a chunk at a time: `fill_jump_steps` (into the jumps' steps rows,
zeros until then: metrics_rows) and `merge_jump_timeline` (into the streams where they were
appended).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from schedsim.metrics.column import Column

# stored per iteration (the requests waiting after its schedule too); the other times are derived
FIELDS: Final = ("start", "gpu", "wait", "kv_usage", "num_waiting")
META: Final = ("cpu_pos", "gpu_pos", "idx0", "k", "lag", "n", "n_last")
COSTS: Final = ("s", "p", "d0", "u0", "d", "u", "s_last", "p_last", "poll0")
CHUNK: Final = 1 << 13  # iterations expanded at a time (their temporaries stay in cache)


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


class _Expanded:
    """Numpy views of a JumpChunks, expanded per iteration one chunk of whole jumps at a time
    (at most CHUNK iterations, or one longer jump): a long run's temporaries stay small."""

    def __init__(self, ch: JumpChunks, chunk: int = CHUNK) -> None:
        self.meta: Any = np.frombuffer(ch.meta.array(), dtype=np.int64).reshape(-1, len(META))
        self.costs: Any = np.frombuffer(ch.costs.array(), dtype=np.float64).reshape(-1, len(COSTS))
        self.fields = {
            f: np.frombuffer(col.array(), dtype=np.float64) for f, col in zip(FIELDS, ch.times, strict=True)
        }
        k = self.meta[:, 3]
        ends = np.cumsum(k)
        self.first_it: Any = ends - k  # each jump's first iteration
        total = int(ends[-1]) if len(k) else 0
        cuts = np.searchsorted(ends, np.arange(chunk, total, chunk), side="right")
        bounds = np.unique(np.concatenate(([0], cuts, [len(k)]))).tolist()
        self.chunks: list[tuple[int, int]] = list(zip(bounds[:-1], bounds[1:], strict=True))

    def iterations(self, j0: int, j1: int) -> dict[str, np.ndarray]:
        """Per iteration of jumps j0 .. j1 - 1: its fields, step, place in its jump, jump's values."""
        meta, costs, k = self.meta[j0:j1], self.costs[j0:j1], self.meta[j0:j1, 3]
        a = int(self.first_it[j0])
        b = a + int(k.sum())
        out: dict[str, np.ndarray] = {f: col[a:b] for f, col in self.fields.items()}
        first_it = self.first_it[j0:j1] - a
        i = np.arange(b - a) - np.repeat(first_it, k)  # index within its jump
        out["step"] = np.repeat(meta[:, 2], k) + i
        out["before"] = out["step"] - np.repeat(meta[:, 4], k)  # the step before, under a queue
        out["first"], out["last"] = i == 0, i == np.repeat(k, k) - 1
        out["n"], out["n_last"] = np.repeat(meta[:, 5], k), np.repeat(meta[:, 6], k)
        for j, c in enumerate(COSTS):
            out[c] = np.repeat(costs[:, j], k)
        out["first_it"] = first_it
        _derive_times(out)
        return out


def _derive_times(it: dict[str, np.ndarray]) -> None:
    """The times fastforward_timeline computes from the stored ones, by its very additions (the
    same IEEE sums): each phase ends its cost after the last (a phase of cost 0 adds nothing),
    d2h and update follow the wait, the next poll is the update, the forward ends start + gpu."""
    last, first = it["last"], it["first"]
    s, p = np.where(last, it["s_last"], it["s"]), np.where(last, it["p_last"], it["p"])
    d, u = np.where(first, it["d0"], it["d"]), np.where(first, it["u0"], it["u"])
    it["d2h"] = d2h = np.where(d > 0, it["wait"] + d, it["wait"])
    it["update"] = update = np.where(u > 0, d2h + u, d2h)
    poll = np.empty_like(update)
    poll[1:] = update[:-1]
    poll[first] = it["poll0"][first]
    it["poll"] = poll
    it["sched"] = sched = np.where(s > 0, poll + s, poll)
    it["ready"] = np.where(p > 0, sched + p, sched)
    it["end"] = it["start"] + it["gpu"]
    it["cost_s"], it["cost_p"], it["cost_d"], it["cost_u"] = s, p, d, u


def fill_jump_steps(ch: JumpChunks, cols: dict[str, np.ndarray], chunk: int = CHUNK) -> None:
    """Write every jump's steps rows into the steps table's columns (arrays indexed by step)."""
    ex = _Expanded(ch, chunk)
    for j0, j1 in ex.chunks:
        it = ex.iterations(j0, j1)
        rows = it["step"]
        for name, field in (
            ("schedule_time", "sched"),
            ("start", "start"),
            ("end", "end"),
            ("gpu_time", "gpu"),
            ("kv_usage", "kv_usage"),
            ("num_waiting", "num_waiting"),
        ):
            cols[name][rows] = it[field]
        cols["num_running"][rows] = it["n"]
        batch = np.where(it["last"], it["n_last"], it["n"])  # the last schedule may leave some out
        cols["num_decode_reqs"][rows] = batch
        cols["num_decode_tokens"][rows] = batch


def _cpu_keep(it: dict[str, np.ndarray]) -> np.ndarray:
    """Which of schedule, prepare, d2h, update each iteration records (cost > 0), (n, 4)."""
    return np.stack([it[c] > 0 for c in ("cost_s", "cost_p", "cost_d", "cost_u")], axis=1)


def _phase_columns(it: dict[str, np.ndarray]) -> tuple[tuple[np.ndarray, ...], ...]:
    """Each CPU phase's (start, end, step) columns, in phase order: schedule and prepare of the
    iteration's step, d2h and update of the step before (a queue)."""
    step, before = it["step"], it["before"]
    return (
        (it["poll"], it["sched"], step),
        (it["sched"], it["ready"], step),
        (it["wait"], it["d2h"], before),
        (it["d2h"], it["update"], before),
    )


def _cpu_rows(
    it: dict[str, np.ndarray], keep: np.ndarray, kinds: tuple[int, int, int, int]
) -> list[np.ndarray]:
    """The CPU rows (kind, start, end, step), iteration-major, phase order within an iteration,
    of the phases `keep` marks."""
    starts, ends, steps = zip(*_phase_columns(it), strict=True)
    cand = (
        np.broadcast_to(np.array(kinds, dtype=np.int8), keep.shape),
        np.stack(starts, axis=1),
        np.stack(ends, axis=1),
        np.stack(steps, axis=1),
    )
    return [c[keep] for c in cand]


def _scatter_phases(
    out: list[Any], pos: np.ndarray, it: dict[str, np.ndarray], kinds: tuple[int, int, int, int]
) -> None:
    """_cpu_rows written straight to `pos` when each iteration keeps all four phases: its rows
    are pos[4 i + q], phase q's (kind, start, end, step) a column apiece."""
    at = pos.reshape(-1, 4)
    for q, (start, end, of_step) in enumerate(_phase_columns(it)):
        rows = at[:, q]
        out[0][rows] = kinds[q]
        out[1][rows] = start
        out[2][rows] = end
        out[3][rows] = of_step


def _row_counts(ex: _Expanded) -> tuple[np.ndarray, np.ndarray]:
    """Each jump's CPU rows, from its costs (steady phases k - 1 times, the first iteration's d2h
    and update and the last's schedule and prepare once), and its GPU rows (forwards > 0)."""
    c, k = ex.costs, ex.meta[:, 3]
    steady = sum((c[:, COSTS.index(x)] > 0).astype(np.int64) for x in ("s", "p", "d", "u"))
    once = sum((c[:, COSTS.index(x)] > 0).astype(np.int64) for x in ("s_last", "p_last", "d0", "u0"))
    gpu = np.add.reduceat((ex.fields["gpu"] > 0).astype(np.int64), ex.first_it)  # k >= 1
    return (k - 1) * steady + once, gpu


def _positions(at: np.ndarray, counts: np.ndarray, r0: int) -> np.ndarray:
    """Merged-stream indices of a chunk's rows: each jump's rows go before the stream row `at`
    (one per jump), after the r0 jump rows of earlier chunks."""
    rows_at = np.repeat(at, counts)
    return rows_at + np.arange(r0, r0 + len(rows_at))


def merge_jump_timeline(
    ch: JumpChunks, cpu: list[Any], gpu: list[Any], kinds: tuple[int, int, int, int], chunk: int = CHUNK
) -> tuple[list[Any], list[Any]]:
    """The CPU (kind, start, end, step) and GPU (start, end, step) streams with every jump's rows
    merged in where they were appended. The rows are made and written a chunk at a time, and each
    stream array is dropped from its list once copied: the peak is the records and the merged
    streams, nothing the size of all the jumps' rows besides."""
    ex = _Expanded(ch, chunk)
    cpu_n, gpu_n = _row_counts(ex)
    cpu_out = [np.empty(len(cpu[0]) + int(cpu_n.sum()), dtype=c.dtype) for c in cpu]
    gpu_out = [np.empty(len(gpu[0]) + int(gpu_n.sum()), dtype=c.dtype) for c in gpu]
    cpu_free, gpu_free = np.ones(len(cpu_out[0]), dtype=bool), np.ones(len(gpu_out[0]), dtype=bool)
    rc = rg = 0
    for j0, j1 in ex.chunks:
        it = ex.iterations(j0, j1)
        pos = _positions(ex.meta[j0:j1, 0], cpu_n[j0:j1], rc)
        cpu_free[pos] = False
        keep = _cpu_keep(it)
        if bool(keep.all()):  # every phase costs time (the usual case): no stack, no mask
            _scatter_phases(cpu_out, pos, it, kinds)
        else:
            for out, rows in zip(cpu_out, _cpu_rows(it, keep, kinds), strict=True):
                out[pos] = rows
        g = it["gpu"] > 0
        gpos = _positions(ex.meta[j0:j1, 1], gpu_n[j0:j1], rg)
        gpu_free[gpos] = False
        for out, rows in zip(gpu_out, (it["start"][g], it["end"][g], it["step"][g]), strict=True):
            out[gpos] = rows
        rc, rg = rc + len(pos), rg + len(gpos)
    _fill_stream(cpu_out, cpu_free, cpu)
    _fill_stream(gpu_out, gpu_free, gpu)
    return cpu_out, gpu_out


def _fill_stream(out: list[Any], free: np.ndarray, stream: list[Any]) -> None:
    """The stream's rows, in order, where no jump row went; each array dropped once copied."""
    for j in range(len(stream)):
        out[j][free] = stream[j]
        stream[j] = None
