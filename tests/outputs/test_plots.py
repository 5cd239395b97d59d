"""Plots, busy-time maths and sweep grids on hand-made tables that follow results.py's schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from schedsim.cli.sweep import parse_grid_flags
from schedsim.experiments.sweep import expand_grid, run_id
from schedsim.outputs.compare_plots import plot_sweep
from schedsim.outputs.plots import (
    _cumulative_busy,
    plot_batch_and_kv,
    plot_busy_timeline,
    plot_latency_distributions,
)
from schedsim.run.config import RunConfig
from schedsim.run.result import REQUEST_COLUMNS, STEP_COLUMNS, TIMELINE_COLUMNS
from schedsim.run.toml_config import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _tables(n: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Tiny requests/steps/timeline tables with every documented column."""
    rng = np.random.default_rng(0)
    req = pd.DataFrame({c: rng.random(n) for c in REQUEST_COLUMNS})
    steps = pd.DataFrame({c: rng.integers(0, 5, n) for c in STEP_COLUMNS})
    steps["start"] = np.arange(n) * 0.02
    steps["end"] = steps["start"] + 0.015
    steps["kv_usage"] = rng.random(n)
    tl = pd.DataFrame(
        {
            "resource": ["cpu", "gpu"] * n,
            "kind": ["schedule", "forward"] * n,
            "start": np.repeat(np.arange(n) * 0.02, 2),
            "step": np.repeat(np.arange(n), 2),
        }
    )
    tl["end"] = tl["start"] + np.where(tl["resource"] == "cpu", 0.004, 0.015)
    assert set(TIMELINE_COLUMNS) <= set(tl.columns)
    return req, steps, tl


@pytest.mark.parametrize("n", [0, 1, 60])
def test_run_plots_are_pngs_even_for_tiny_tables(tmp_path: Path, n: int) -> None:
    req, steps, tl = _tables(n)
    for fn, df in ((plot_latency_distributions, req), (plot_batch_and_kv, steps), (plot_busy_timeline, tl)):
        path = tmp_path / f"{fn.__name__}.png"
        fn(df, path)
        assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000


def test_cumulative_busy_matches_direct_sum() -> None:
    rng = np.random.default_rng(1)
    start = np.sort(rng.random(200) * 10)
    end = start + rng.random(200) * 0.05
    t = np.linspace(-1, 12, 57)
    direct = np.array([np.clip(x - start, 0.0, end - start).sum() for x in t])
    np.testing.assert_allclose(_cumulative_busy(start, end, t), direct, atol=1e-9)


def test_grid_is_a_product_and_ids_follow_the_config() -> None:
    base = RunConfig(max_requests=10)
    runs = expand_grid(base, {"policy": ["vllm", "vllm-async"], "rate": [1, 2, 4]})
    assert len(runs) == 6 and len({r.run_id for r in runs}) == 6
    assert {(r.config.policy, r.config.rate) for r in runs} == {
        (p, r) for p in ("vllm", "vllm-async") for r in (1, 2, 4)
    }
    # the id is a function of the resolved config alone, whatever the grid order
    again = expand_grid(base, {"rate": [4, 2, 1], "policy": ["vllm-async", "vllm"]})
    assert {r.run_id for r in again} == {r.run_id for r in runs}
    assert run_id(RunConfig(max_requests=10, rate=2)) != run_id(RunConfig(max_requests=10, rate=4))


def test_grid_reaches_policy_options_and_dedups() -> None:
    runs = expand_grid(RunConfig(), {"policy_options.foo": [1, 2], "seed": [0, 0]})
    assert sorted(r.config.policy_options["foo"] for r in runs) == [1, 2]


def test_grid_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="'rat'"):
        expand_grid(RunConfig(), {"rat": [1]})
    with pytest.raises(ConfigError, match="RunConfig.rate"):
        expand_grid(RunConfig(), {"rate": [-1.0]})
    with pytest.raises(ConfigError, match="non-empty list"):
        expand_grid(RunConfig(), {"rate": []})
    with pytest.raises(ConfigError, match="KEY=V1"):
        parse_grid_flags(["rate"])
    assert parse_grid_flags(["rate=1,2.5", "max-num-seqs=8"]) == {"rate": [1, 2.5], "max_num_seqs": [8]}


def test_sweep_plot_one_line_per_policy(tmp_path: Path) -> None:
    table = pd.DataFrame(
        {"policy": ["a", "a", "b", "b"], "rate": [1, 2, 1, 2], "p99_ttft_ms": [10.0, 20.0, 12.0, 30.0]}
    )
    paths = plot_sweep(table, "rate", ["p99_ttft_ms", "absent_metric"], tmp_path)
    assert [p.name for p in paths] == ["sweep_p99_ttft_ms_vs_rate.png"]
    from schedsim.outputs.compare_plots import plot_metric_vs_knob

    fig = plot_metric_vs_knob(table, "rate", "p99_ttft_ms", ["policy"])
    assert sorted(line.get_label() for line in fig.axes[0].lines) == ["a", "b"]
    with pytest.raises(ValueError, match="'knob'"):
        plot_sweep(table, "knob", ["p99_ttft_ms"], tmp_path)
