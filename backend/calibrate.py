"""Step-time measurements of the real backend over a grid of step shapes, in the CSV form that
`schedsim calibrate --steps` fits (step_time_s, prefill_tokens, decode_count, sum_context,
sum_context_sq). step_time_s is device time only, as in a replay, and the minimum over interleaved
repeats (`step_timing`); the host's share of each step (packing inputs, enqueueing kernels) is
reported beside it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pandas as pd

from .executor import RealExecutor
from .step_timing import Shape, ShapeTimes, time_shapes


def _ladder(top: int, start: int, factor: int) -> tuple[int, ...]:
    """start, start*factor, ... below top, then top itself (empty when top < 1)."""
    out: list[int] = []
    v = start
    while v < top:
        out.append(v)
        v *= factor
    return (*out, top) if top >= 1 else ()


@dataclass(frozen=True)
class CalibrationGrid:
    """Shapes to time: one prefill chunk (new tokens over cached context) plus D decodes."""

    prefill_tokens: tuple[int, ...] = (0, 16, 64, 256)
    prefill_context: tuple[int, ...] = (0, 256)
    num_decodes: tuple[int, ...] = (0, 1, 4, 16)
    decode_context: tuple[int, ...] = (32, 256)
    repeats: int = 3
    max_context: int | None = None  # skip shapes whose prefill or decodes reach past this many tokens
    max_mixed_prefill: int | None = None  # prefill chunks above this size are timed without decodes

    def __post_init__(self) -> None:
        """Reject empty or negative axes, naming the field."""
        for name in ("prefill_tokens", "prefill_context", "num_decodes", "decode_context"):
            values = getattr(self, name)
            if not values or min(values) < 0:
                raise ValueError(f"CalibrationGrid.{name} must be a non-empty tuple of values >= 0")
        if self.repeats < 1:
            raise ValueError(f"CalibrationGrid.repeats must be >= 1, got {self.repeats}")
        for name in ("max_context", "max_mixed_prefill"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"CalibrationGrid.{name} must be None or >= 1, got {value}")

    @classmethod
    def covering(
        cls, max_prefill: int, max_context: int, max_decodes: int, repeats: int = 4
    ) -> CalibrationGrid:
        """A grid whose shapes span a workload's: prefill chunks up to max_prefill tokens (over no
        context, or half the longest context), up to max_decodes decodes of up to max_context
        tokens each; mixed steps pair the decodes with chunks up to 256 tokens."""
        return cls(
            prefill_tokens=(0, *_ladder(max(max_prefill, 1), 16, 4)),
            prefill_context=(0, max_context // 2) if max_context >= 64 else (0,),
            num_decodes=(0, *_ladder(max(max_decodes, 1), 1, 2)),
            decode_context=_ladder(max(max_context - 1, 1), 16, 8),
            repeats=repeats,
            max_context=max_context,
            max_mixed_prefill=256,
        )

    def shapes(self) -> list[tuple[int, int, int, int]]:
        """(prefill tokens, prefill context, decodes, decode context), skipping empty steps and
        axes that do not matter (context of an absent prefill, context of zero decodes)."""
        out = set()
        for p, pc, d, dc in itertools.product(
            self.prefill_tokens, self.prefill_context, self.num_decodes, self.decode_context
        ):
            if not (p or d):
                continue
            if self.max_context is not None and (p + pc > self.max_context or dc + 1 > self.max_context):
                continue
            if p and d and self.max_mixed_prefill is not None and p > self.max_mixed_prefill:
                continue
            out.add((p, pc if p else 0, d, dc if d else 0))
        return sorted(out)

    def bounds(self) -> dict[str, float]:
        """The largest value of each step feature over the grid (beyond them a model extrapolates)."""
        rows = [grid_row(s) for s in self.shapes()]
        keys = ("prefill_tokens", "decode_count", "sum_context", "sum_context_sq")
        return {k: float(max((r[k] for r in rows), default=0)) for k in keys}


def grid_shape(shape: tuple[int, int, int, int]) -> Shape:
    """A grid shape in `step_timing`'s form."""
    p, pc, d, dc = shape
    return (((p, pc),) if p else ()), (dc,) * d


def grid_row(shape: tuple[int, int, int, int]) -> dict[str, int]:
    """The step features of one grid shape, as the calibration table holds them."""
    p, pc, d, dc = shape
    return {
        "prefill_tokens": p,
        "decode_count": d,
        "sum_context": (p + pc) + d * (dc + 1),
        "sum_context_sq": (p + pc) ** 2 - pc**2,
        "prefill_context": pc,
        "decode_context": dc,
    }


def measure_steps(executor: RealExecutor, grid: CalibrationGrid | None = None) -> pd.DataFrame:
    """One row per shape: device time (minimum over `repeats` interleaved runs, after one untimed),
    its median and the gap between its two fastest runs (noise), and the host parts' medians."""
    grid = grid or CalibrationGrid()
    shapes = grid.shapes()
    return grid_table(shapes, time_shapes(executor, [grid_shape(s) for s in shapes], grid.repeats))


def grid_table(shapes: list[tuple[int, int, int, int]], times: ShapeTimes) -> pd.DataFrame:
    """The calibration table of grid shapes from their timings (`measure_steps`' rows)."""
    best, median, noise = times.best_s, times.median_s, times.top_two_gap()
    rows = [
        {
            "step_time_s": float(best[i]),
            "step_time_median_s": float(median[i]),
            "repeat_gap": float(noise[i]),
            "host_prepare_s": float(times.host_prepare_s[i]),
            "host_enqueue_s": float(times.host_enqueue_s[i]),
            **grid_row(shape),
        }
        for i, shape in enumerate(shapes)
    ]
    return pd.DataFrame(rows)
