"""Timing given step shapes on the backend, robustly: every shape runs once untimed, then `repeats`
interleaved passes over all shapes time each one (a burst of load from another process hits every
shape alike rather than all repeats of one), and a shape's time is the minimum over its repeats.
The timed passes visit the shapes from the quickest to the slowest (by the untimed run) and back,
alternately, so each step follows one of similar size: a small step timed right after a large one
would pay for the caches and memory the large one disturbed.
The gap between a shape's two fastest repeats is the measurement's own noise, which reports quote:
when even the two best runs of the same step disagree, its minimum cannot be trusted either."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from schedsim.policies.plan import StepPlan
from schedsim.policies.request import Request

from .executor import RealExecutor

# (prefill chunks as (new tokens, cached context), decode contexts): what one step computes.
Shape = tuple[tuple[tuple[int, int], ...], tuple[int, ...]]


def blocks_needed(shape: Shape, block_size: int) -> int:
    """KV blocks a shape's requests hold, each on blocks of its own."""
    prefills, decodes = shape
    return sum(-(-(n + c) // block_size) for n, c in prefills) + sum(
        -(-(c + 1) // block_size) for c in decodes
    )


def shape_plan(
    shape: Shape, block_size: int, num_blocks: int, vocab: int
) -> tuple[StepPlan, dict[str, Request]]:
    """A plan with fresh requests of the given shape on consecutive blocks from block 1 (wrapping
    around a pool too small for all of them: timing does not depend on which blocks are read)."""
    prefills, decodes = shape
    parts = [(f"p{i}", c, n) for i, (n, c) in enumerate(prefills)] + [
        (f"d{i}", c, 1) for i, c in enumerate(decodes)
    ]
    plan = StepPlan(step_id=0)
    requests: dict[str, Request] = {}
    usable = num_blocks - 1  # block 0 is the null block
    next_block = 0
    for rid, ctx, n in parts:
        total = ctx + n
        count = -(-total // block_size)
        prompt = [(31 * k + len(rid)) % (vocab - 3) + 3 for k in range(total)]
        requests[rid] = Request(rid, 0.0, total, 1, prompt_token_ids=prompt)
        plan.num_scheduled_tokens[rid] = n
        plan.context_lens[rid] = ctx
        plan.block_ids[rid] = [1 + (next_block + j) % usable for j in range(count)]
        plan.new_req_ids.append(rid)
        next_block += count
    plan.total_num_scheduled_tokens = sum(n for _, _, n in parts)
    return plan, requests


@dataclass(frozen=True)
class ShapeTimes:
    """Per shape: device seconds of every timed repeat ([repeats, shapes]) and host parts' medians."""

    device_s: np.ndarray
    host_prepare_s: np.ndarray
    host_enqueue_s: np.ndarray

    def columns(self, rows: Sequence[int] | slice) -> ShapeTimes:
        """The timings of some of the shapes (an index list or a slice of the shape order)."""
        return ShapeTimes(self.device_s[:, rows], self.host_prepare_s[rows], self.host_enqueue_s[rows])

    @property
    def best_s(self) -> np.ndarray:
        """The minimum over repeats: the shape's time with the least interference."""
        return self.device_s.min(axis=0)

    @property
    def median_s(self) -> np.ndarray:
        """The median over repeats."""
        return np.median(self.device_s, axis=0)

    def top_two_gap(self) -> np.ndarray:
        """(second fastest - fastest) / fastest repeat, per shape (NaN with one repeat)."""
        if self.device_s.shape[0] < 2:
            return np.full(self.device_s.shape[1], np.nan)
        two = np.sort(self.device_s, axis=0)[:2]
        return (two[1] - two[0]) / two[0]


def time_shapes(
    executor: RealExecutor, shapes: Sequence[Shape], repeats: int, on_pass: Callable[[], None] | None = None
) -> ShapeTimes:
    """Run every shape once untimed, then `repeats` interleaved timed passes (see the module doc);
    `on_pass` is called after each of the repeats + 1 passes (a progress bar)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cache, vocab = executor.cache, executor.model.cfg.vocab_size
    plans = [shape_plan(s, cache.block_size, cache.num_blocks, vocab) for s in shapes]
    first = [_run(executor, plan, requests)[0] for plan, requests in plans]
    if on_pass is not None:
        on_pass()
    order = [int(i) for i in np.argsort(first, kind="stable")]
    runs = np.zeros((3, repeats, len(plans)))
    for rep in range(repeats):
        for i in order if rep % 2 == 0 else order[::-1]:
            runs[:, rep, i] = _run(executor, *plans[i])
        if on_pass is not None:
            on_pass()
    return ShapeTimes(runs[0], np.median(runs[1], axis=0), np.median(runs[2], axis=0))


def _run(executor: RealExecutor, plan: StepPlan, requests: dict[str, Request]) -> tuple[float, float, float]:
    """One step: (device seconds, host prepare seconds, host enqueue seconds)."""
    handle = executor.launch(plan, requests)
    executor.collect(handle)
    executor.states.clear()
    return handle.device_seconds, handle.host_prepare_s, handle.host_enqueue_s
