"""Time-parallel simulation at regeneration points: the trace's second part replayed in a helper.

A serving engine that idles before an arrival, holding nothing (no request, no block, no batch in
flight), has forgotten its past: what it does from there depends only on the arrivals to come (a
regeneration point of the queueing process). So a helper process, forked after the workload is
prepared, replays the trace from an arrival near the middle of its work with a fresh engine, while
this process replays it from the start. Where both pass the same arrival idle in equal states
(`IdlePoint.state`: the policy's `idle_state()` and the recorder's), the helper's run from there
on is the serial run's, and the tables are spliced there (segments_merge): the same rows, byte
for byte, as one process would have produced. Without a common idle point this process simply
runs on to the end and the helper's work is dropped; a failed helper means a serial rerun.

Prefix caching is where a fresh engine could differ: blocks cached before the split could be hit
after it. A split is taken only at a "prefix-safe" arrival, one before which no request shares a
prefix with a request after it (schedsim.policies.kv_cache.hashing: prompts known only by their
length are private to their request); the free list's order and stale cached blocks then change
block ids only, which no table shows.

Policies opt in by declaring `idle_state()`; every registered one does (vLLM's two schedulers,
TensorRT-LLM's, the baselines, SGLang's). A policy without it runs in one process. What the
summary counts outside the tables (fast-forward jumps, TensorRT-LLM's prefix skips) is carried
by `run_counters()` and added up across the split.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedsim.run.config import RunConfig
from schedsim.run.segments_merge import Tables
from schedsim.worlds.simpy_world import ARRIVAL, InputStream

MIN_ARRIVALS = 4096  # 'auto': below this a split saves less than the fork costs
MAX_ARRIVALS = 250_000  # 'auto': above this the helper's recorder would double a long run's memory
SPLIT_WORK = 0.55  # the helper starts where 55 % of the tokens have arrived: past the middle,
                  # as shipping its tables back costs it ~0.2 s more than our own cost us
MIN_TAIL = 0.1  # no split where less than this share of the tokens is still to arrive: the
                # helper's tables would take longer to ship than the rest takes to simulate


@dataclass
class SplitRun:
    """One process's run: the pieces `segments` and `simulate` read."""

    engine: Any
    world: Any
    metrics: Any
    depth: int


@dataclass(frozen=True)
class SplitPlan:
    """Where the helper starts, which arrivals may be split points, and each row's position."""

    start: int  # input-stream position of the helper's first arrival
    safe: np.ndarray  # per stream position: a split there is prefix-safe
    row_pos: np.ndarray  # workload row -> stream position of its arrival (-1: never arrives)
    num_positions: int
    last_split: int  # no split after this stream position (MIN_TAIL)


@dataclass(frozen=True)
class IdlePoint:
    """A run idling before the arrival at stream position `pos`, holding nothing."""

    pos: int
    launched: int  # steps launched before it (the step ids after it are shifted by this)
    itl_mark: tuple[int, float, int]  # RunLengths.mark() of the ITL samples
    counters: tuple[int, ...]  # run_counters(): what the summary counts outside the tables
    state: tuple[Any, ...]  # must be equal in both runs

    def digest(self) -> bytes:
        """16 bytes naming `state` (repr: tuples of ints, bools and strings, process-independent)."""
        return hashlib.blake2b(repr(self.state).encode(), digest_size=16).digest()


@dataclass(frozen=True)
class Merged:
    """The spliced run: tables, run_counters() and where the split fell."""

    tables: Tables
    counters: tuple[int, ...]
    start: int
    split: IdlePoint

    def describe(self) -> dict[str, Any]:
        """For RunResult.config['parallel_resolved']."""
        return {"segments": 2, "helper_start_position": self.start,
                "split_position": self.split.pos, "split_step": self.split.launched}


def idle_point(world: Any, due: float, safe: np.ndarray) -> IdlePoint | None:
    """The world's state if it idles, holding nothing, before a prefix-safe arrival due at `due`."""
    inputs: InputStream = world.inputs
    pos = inputs.pos
    if inputs.kinds[pos] != ARRIVAL or not safe[pos]:
        return None
    if not (world.cpu_now <= due and world.gpu_free <= due):  # NaN: a sample still held
        return None
    engine_state, recorder_state = world.engine.idle_state(), world.metrics.idle_state()
    if engine_state is None or recorder_state is None:
        return None
    return IdlePoint(pos, world.engine.num_launched, world.metrics.itl_gaps.mark(),
                     run_counters(world), (engine_state, recorder_state))


def prefix_skips(policy: Any) -> int:
    """TensorRT-LLM's prefix-aware skips so far (0 for the other policies)."""
    skips = getattr(getattr(policy, "stats", None), "num_prefix_skips", None)
    return int(skips) if skips is not None else 0


def run_counters(world: Any) -> tuple[int, int, int]:
    """Counts the summary takes from the run, not its tables: fast-forward jumps and jumped
    steps, TensorRT-LLM's prefix skips (a split run adds the helper's after the split)."""
    return world.num_jumps, world.num_jumped_steps, prefix_skips(world.engine.policy)


def plan_split(cfg: RunConfig, prep: Any, rows: np.ndarray, run: SplitRun
               ) -> tuple[SplitPlan | None, str]:
    """Whether to split this run, and where the helper starts (None and why not)."""
    inputs: InputStream = run.world.inputs
    kinds = np.frombuffer(inputs.kinds, dtype=np.int8)
    arrivals = np.flatnonzero(kinds == ARRIVAL)
    mode = getattr(cfg, "parallel", "off")
    why = _unsplittable(mode, len(arrivals), run)
    if why:
        return None, why
    refs = np.frombuffer(inputs.refs, dtype=np.int64)
    arrival_rows = np.asarray(rows, dtype=np.int64)[refs[arrivals]]
    safe = prefix_safe(prep, arrival_rows, arrivals, len(kinds))
    work = (np.asarray(prep.columns.prompt, dtype=np.float64)[arrival_rows]
            + np.asarray(prep.targets, dtype=np.float64)[arrival_rows])
    cum = np.cumsum(work)
    k = max(1, int(np.searchsorted(cum, SPLIT_WORK * cum[-1])))
    later = arrivals[k:]
    starts = later[safe[later]]
    if not len(starts):
        return None, "serial: no prefix-safe arrival in the second half"
    row_pos = np.full(len(prep), -1, dtype=np.int64)
    row_pos[arrival_rows] = arrivals
    last = int(arrivals[min(len(arrivals) - 1, int(np.searchsorted(cum, (1 - MIN_TAIL) * cum[-1])))])
    return SplitPlan(int(starts[0]), safe, row_pos, len(kinds), last), ""


def _unsplittable(mode: str, num_arrivals: int, run: SplitRun) -> str:
    """Why this run stays in one process ('' if it may split)."""
    if mode == "off":
        return "serial: parallel='off'"
    if not hasattr(os, "fork"):
        return "serial: no os.fork on this platform"
    if getattr(run.engine.policy, "idle_state", None) is None:
        return f"serial: policy {type(run.engine.policy).__name__} declares no idle_state()"
    if num_arrivals < 2:
        return "serial: fewer than 2 arrivals"
    if mode == "auto" and _num_cpus() < 2:
        return "serial: one CPU"
    if mode == "auto" and num_arrivals < MIN_ARRIVALS:
        return f"serial: fewer than {MIN_ARRIVALS} arrivals"
    if mode == "auto" and num_arrivals > MAX_ARRIVALS:
        return f"serial: more than {MAX_ARRIVALS} arrivals (the helper would double the memory)"
    return ""


def _num_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def prefix_safe(prep: Any, arrival_rows: np.ndarray, arrivals: np.ndarray, n: int) -> np.ndarray:
    """Per stream position: no request arriving before it shares a prefix with one from it on.

    Requests can share blocks only through trace-given prompt hashes (the chain starts with the
    first one) or an empty prompt (outputs chain on the root); every other prompt is private.
    """
    hashes, prompt = prep.hashes, prep.columns.prompt
    if not any(hashes) and (not len(prompt) or int(np.min(prompt)) > 0):
        return np.ones(n, dtype=bool)  # every prompt private (a million rows: no Python loop)
    open_ = np.zeros(n + 1, dtype=np.int64)
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    for row, p in zip(arrival_rows.tolist(), arrivals.tolist(), strict=True):
        given = hashes[row]
        key = ("given", given[0]) if given else ("empty",) if prompt[row] == 0 else None
        if key is not None:
            first.setdefault(key, p)
            last[key] = p
    for key, p0 in first.items():  # unsafe: first < p <= last
        open_[p0 + 1] += 1
        open_[last[key] + 1] -= 1
    return np.cumsum(open_)[:n] == 0
