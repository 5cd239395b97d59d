"""The times of a fast-forward stretch: the same sums the world makes iteration by iteration.

Each iteration is: poll, schedule and prepare_inputs phases, launch (the GPU starts when both the
CPU and the previous step are done), wait (sync: for this step; async: for the one before), d2h
copy, abort poll, update_from_output. The stretch stops before an iteration whose top poll would
take an input, whose mid-iteration poll would take an abort, or whose wait ends past `until`.
"""

from __future__ import annotations

import math
from typing import Any

from .latency.base import StepShape

TIME_KEYS = ("poll", "sched", "ready", "start", "end", "gpu", "wait", "d2h", "update")


class _Bounds:
    """What ends a stretch: the next input, the next abort the mid-iteration poll takes, `until`."""

    __slots__ = ("input", "abort", "until", "sync")

    def __init__(self, world: Any, sync: bool) -> None:
        nxt_input = world.inputs.next_time()
        self.input = math.inf if nxt_input is None else nxt_input
        nxt_abort = world.inputs.next_abort_poll_time()  # the mid-iteration poll takes only aborts
        self.abort = math.inf if nxt_abort is None else nxt_abort
        self.until = world.until
        self.sync = sync


def _iteration(b: _Bounds, c: float, gpu_free: float, prev_end: float, s: float, p: float,
               d: float, u: float, g: float) -> tuple[float, ...] | None:
    """One iteration's TIME_KEYS values from the clock before it; None where it may not be jumped."""
    if b.input <= c:
        return None
    c1 = c + s if s > 0 else c
    c2 = c1 + p if p > 0 else c1
    start = c2 if c2 > gpu_free else gpu_free
    end = start + g
    waited = end if b.sync else prev_end  # sync waits on this step, async on the last
    t = waited if waited > c2 else c2
    if t > b.until:
        return None
    c4 = t + d if d > 0 else t
    if b.abort <= c4:
        return None
    return c, c1, c2, start, end, g, t, c4, c4 + u if u > 0 else c4


def timeline(world: Any, reqs: list, prev: Any, limit: int) -> dict[str, Any]:
    """The times of up to `limit` iterations, stopping before one that would see an input."""
    n = len(reqs)
    phase = world.cpu_model.phase_time
    s, p = phase("schedule", n, n), phase("prepare_inputs", n, n)
    d = d0 = phase("d2h_copy", n, n)
    u = u0 = phase("update_from_output", n, n)
    if prev is not None:
        m, tok = len(prev[1].num_scheduled_tokens), prev[1].total_num_scheduled_tokens
        d0, u0 = phase("d2h_copy", m, tok), phase("update_from_output", m, tok)
    bounds = _Bounds(world, prev is None)
    c, gpu_free = world.cpu_now, world.gpu_free
    prev_end = prev[0].end if prev is not None else math.nan
    step_time = decode_times(world.executor.latency_model, [r.num_computed_tokens for r in reqs])
    cols: tuple[list[float], ...] = tuple([] for _ in TIME_KEYS)
    for i in range(limit):
        row = _iteration(bounds, c, gpu_free, prev_end, s, p, d0 if i == 0 else d,
                         u0 if i == 0 else u, step_time(i))
        if row is None:
            break
        for col, v in zip(cols, row, strict=True):
            col.append(v)
        gpu_free = prev_end = row[4]
        c = row[8]
    out: dict[str, Any] = dict(zip(TIME_KEYS, cols, strict=True))
    out["costs"] = (s, p, d0, u0, d, u)
    return out


def retime_last(world: Any, prev: Any, times: dict[str, Any], kept: list) -> bool:
    """Redo the last iteration with only `kept` scheduled; False (and it is dropped) where nobody
    is kept or the shorter schedule changes what ends the stretch."""
    i = len(times["sched"]) - 1
    n = len(kept)
    phase = world.cpu_model.phase_time
    s, p = phase("schedule", n, n), phase("prepare_inputs", n, n)
    _, _, d0, u0, d, u = times["costs"]
    if i == 0:
        c, gpu_free = world.cpu_now, world.gpu_free
        prev_end = prev[0].end if prev is not None else math.nan
    else:
        c, gpu_free = times["update"][i - 1], times["end"][i - 1]
        prev_end = gpu_free
    row = None
    if kept:
        g = decode_times(world.executor.latency_model, [r.num_computed_tokens for r in kept])(i)
        row = _iteration(_Bounds(world, prev is None), c, gpu_free, prev_end, s, p,
                         d0 if i == 0 else d, u0 if i == 0 else u, g)
    if row is None:
        for key in TIME_KEYS:
            times[key].pop()
        return False
    for key, v in zip(TIME_KEYS, row, strict=True):
        times[key][i] = v
    times["last"] = (n, s, p)  # the last iteration's batch and schedule-side costs
    return True


def decode_times(model: Any, ctx0: list[int]) -> Any:
    """i -> GPU time of the stretch's i-th step (every context one longer per step)."""
    n, ctx_sum = len(ctx0), sum(ctx0)
    closed = getattr(model, "decode_step_time", None)
    if closed is not None:
        return lambda i: float(closed(n, ctx_sum + n * i))
    shape = StepShape()

    def by_shape(i: int) -> float:
        shape.decodes = [(x + i, 0) for x in ctx0]
        return float(model.step_time(shape))
    return by_shape
