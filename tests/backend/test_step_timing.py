"""Timing step shapes robustly: minimum over interleaved repeats, the noise figure, covering grids."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.backend.calibrate import CalibrationGrid  # noqa: E402
from schedsim.backend.step_timing import ShapeTimes, blocks_needed, shape_plan, time_shapes  # noqa: E402


def test_a_shape_time_is_the_minimum_over_repeats_and_the_noise_the_gap_of_the_two_fastest():
    device = np.array([[3.0, 10.0], [2.0, 10.0], [2.2, 13.0], [5.0, 11.0]])
    times = ShapeTimes(device, np.zeros(2), np.zeros(2))
    assert times.best_s.tolist() == [2.0, 10.0]
    assert times.top_two_gap() == pytest.approx([0.1, 0.0])
    assert times.columns([1]).best_s.tolist() == [10.0]
    assert np.isnan(ShapeTimes(device[:1], np.zeros(2), np.zeros(2)).top_two_gap()).all()


def test_shape_plans_wrap_around_a_pool_too_small_for_every_request():
    shape = (((40, 8),), (30, 30, 30))
    assert blocks_needed(shape, 4) == 12 + 3 * 8
    plan, requests = shape_plan(shape, 4, 10, 512)
    assert plan.total_num_scheduled_tokens == 43 and set(requests) == {"p0", "d0", "d1", "d2"}
    assert all(1 <= b < 10 for ids in plan.block_ids.values() for b in ids)
    assert plan.context_lens == {"p0": 8, "d0": 30, "d1": 30, "d2": 30}


def test_every_shape_is_timed_once_per_repeat_in_alternating_order(monkeypatch):
    ex = RealExecutor.from_config(ExecutorConfig(model="tiny", block_size=4, num_blocks=64, device="cpu"))
    seen: list[int] = []
    original = RealExecutor.launch

    def launch(self, plan, requests):
        seen.append(plan.total_num_scheduled_tokens)
        return original(self, plan, requests)

    monkeypatch.setattr(RealExecutor, "launch", launch)
    shapes = [((), (8,)), (((24, 0),), ()), ((), (8, 8))]
    times = time_shapes(ex, shapes, 3)
    assert times.device_s.shape == (3, 3) and (times.device_s > 0).all()
    untimed, timed = seen[:3], seen[3:]
    assert untimed == [1, 24, 2]
    passes = [timed[0:3], timed[3:6], timed[6:9]]
    assert passes[1] == passes[0][::-1] and passes[2] == passes[0]  # there and back
    assert sorted(passes[0]) == [1, 2, 24]


@pytest.mark.parametrize("prefill,context,decodes", [(4096, 4096, 14), (40, 120, 3), (1, 20, 1)])
def test_a_covering_grid_reaches_the_workload_bounds_and_stays_within_the_context(prefill, context, decodes):
    grid = CalibrationGrid.covering(prefill, context, decodes, repeats=2)
    shapes = grid.shapes()
    assert max(p for p, *_ in shapes) == prefill
    assert max(d for _, _, d, _ in shapes) == decodes
    assert max(dc + 1 for *_, d, dc in shapes if d) == context
    assert all(p + pc <= context for p, pc, _, _ in shapes)
    bounds = grid.bounds()
    assert bounds["prefill_tokens"] == prefill and bounds["decode_count"] == decodes
