"""Step-time measurements of the real backend over a grid of step shapes, in the CSV form that
`schedsim calibrate --steps` fits (step_time_s, prefill_tokens, decode_count, sum_context,
sum_context_sq). step_time_s is device time only, as in a replay; the host's share of each step
(packing inputs, enqueueing kernels) is reported beside it."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass

import pandas as pd
from schedsim.policies.plan import StepPlan
from schedsim.policies.request import Request

from .executor import RealExecutor


@dataclass(frozen=True)
class CalibrationGrid:
    """Shapes to time: one prefill chunk (new tokens over cached context) plus D decodes."""

    prefill_tokens: tuple[int, ...] = (0, 16, 64, 256)
    prefill_context: tuple[int, ...] = (0, 256)
    num_decodes: tuple[int, ...] = (0, 1, 4, 16)
    decode_context: tuple[int, ...] = (32, 256)
    repeats: int = 3

    def __post_init__(self) -> None:
        """Reject empty or negative axes, naming the field."""
        for name in ("prefill_tokens", "prefill_context", "num_decodes", "decode_context"):
            values = getattr(self, name)
            if not values or min(values) < 0:
                raise ValueError(f"CalibrationGrid.{name} must be a non-empty tuple of values >= 0")
        if self.repeats < 1:
            raise ValueError(f"CalibrationGrid.repeats must be >= 1, got {self.repeats}")

    def shapes(self) -> list[tuple[int, int, int, int]]:
        """(prefill tokens, prefill context, decodes, decode context), skipping empty steps and
        axes that do not matter (context of an absent prefill, context of zero decodes)."""
        out = set()
        for p, pc, d, dc in itertools.product(
            self.prefill_tokens, self.prefill_context, self.num_decodes, self.decode_context
        ):
            if p or d:
                out.add((p, pc if p else 0, d, dc if d else 0))
        return sorted(out)


def _shape_plan(
    shape: tuple[int, int, int, int], block_size: int, vocab: int, step: int
) -> tuple[StepPlan, dict[str, Request]]:
    """A plan with fresh requests of the given shape, on consecutive blocks from block 1."""
    p, pc, d, dc = shape
    parts = ([("p", pc, p)] if p else []) + [(f"d{i}", dc, 1) for i in range(d)]
    plan = StepPlan(step_id=step)
    requests: dict[str, Request] = {}
    next_block = 1
    for rid, ctx, n in parts:
        total = ctx + n
        num_blocks = -(-total // block_size)
        prompt = [(31 * k + len(rid)) % (vocab - 3) + 3 for k in range(total)]
        requests[rid] = Request(rid, 0.0, total, 1, prompt_token_ids=prompt)
        plan.num_scheduled_tokens[rid] = n
        plan.context_lens[rid] = ctx
        plan.block_ids[rid] = list(range(next_block, next_block + num_blocks))
        plan.new_req_ids.append(rid)
        next_block += num_blocks
    plan.total_num_scheduled_tokens = sum(n for _, _, n in parts)
    return plan, requests


@dataclass(frozen=True)
class StepTiming:
    """One timed step: device seconds (the figure the latency model fits) and the host's parts."""

    device_s: float
    host_prepare_s: float
    host_enqueue_s: float


def _time_step(executor: RealExecutor, plan: StepPlan, requests: dict[str, Request]) -> StepTiming:
    """Time one step: the device from after its inputs were packed, the host apart (so a synchronous
    calibration and an asynchronous replay measure the same thing)."""
    t0 = time.perf_counter()
    handle = executor.launch(plan, requests)
    executor.collect(handle)
    wall = time.perf_counter() - t0
    executor.states.clear()
    return StepTiming(handle.device_seconds or wall, handle.host_prepare_s, handle.host_enqueue_s)


def measure_steps(executor: RealExecutor, grid: CalibrationGrid | None = None) -> pd.DataFrame:
    """One row per shape: median device time and host parts over `repeats` runs (after one untimed)."""
    grid = grid or CalibrationGrid()
    cache, vocab = executor.cache, executor.model.cfg.vocab_size
    rows: list[dict[str, float]] = []
    for shape in grid.shapes():
        p, pc, d, dc = shape
        need = (-(-(p + pc) // cache.block_size) if p else 0) + d * -(-(dc + 1) // cache.block_size)
        if need >= cache.num_blocks:
            raise ValueError(
                f"shape {shape} needs {need} KV blocks, the cache has {cache.num_blocks - 1}; "
                "raise num_blocks or shrink the grid"
            )
        plan, requests = _shape_plan(shape, cache.block_size, vocab, len(rows))
        _time_step(executor, plan, requests)
        times = [_time_step(executor, plan, requests) for _ in range(grid.repeats)]
        rows.append(
            {
                "step_time_s": statistics.median(t.device_s for t in times),
                "host_prepare_s": statistics.median(t.host_prepare_s for t in times),
                "host_enqueue_s": statistics.median(t.host_enqueue_s for t in times),
                "prefill_tokens": p,
                "decode_count": d,
                "sum_context": (p + pc) + d * (dc + 1),
                "sum_context_sq": (p + pc) ** 2 - pc**2,
                "prefill_context": pc,
                "decode_context": dc,
            }
        )
    return pd.DataFrame(rows)
