"""Readable plots and tables: counts as integers, the busy timeline timed from its window with
every GPU step visible (or a note that they are too dense), small multiples for many variants,
legends whose entries are distinct."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from schedsim.experiments.compare import format_side_by_side
from schedsim.outputs.compare_plots import MAX_OVERLAID, plot_metric_vs_knob, plot_over_time
from schedsim.outputs.files import format_summary
from schedsim.outputs.plots import distinct_legend, plot_busy_timeline, zoom_steps

pytestmark = pytest.mark.pure_python


def _timeline(n: int, t0: float, cycle: float, gpu: float, gap_after: int | None = None) -> pd.DataFrame:
    """n steps launched every `cycle` s from t0, each a CPU schedule then `gpu` s of forward; an
    idle gap of 1000 s after step `gap_after`."""
    start = t0 + np.arange(n) * cycle
    if gap_after is not None:
        start[gap_after + 1 :] += 1000.0
    cpu_end = start + min(cycle / 10, 1e-4)
    return pd.DataFrame(
        {
            "resource": pd.Categorical(["cpu", "gpu"] * n),
            "kind": pd.Categorical(["schedule", "forward"] * n),
            "start": np.ravel(np.column_stack([start, cpu_end])),
            "end": np.ravel(np.column_stack([cpu_end, cpu_end + gpu])),
            "step": np.repeat(np.arange(n), 2),
        }
    )


def _drawn(fig: Figure) -> Figure:
    """The figure after a render (tick labels and offsets exist only then)."""
    fig.savefig(io.BytesIO(), format="png", dpi=40)
    return fig


def test_busy_timeline_is_timed_from_the_window_start() -> None:
    fig = _drawn(plot_busy_timeline(_timeline(40, 1808.0, 0.01, 0.0099)))
    zoom = fig.axes[0]
    assert zoom.get_xlim()[0] == 0 and zoom.get_xlim()[1] < 100  # ms of an 8-step window
    assert zoom.xaxis.get_offset_text().get_text() == ""  # no "+1.808e6"
    assert "1,808.2" in zoom.get_xlabel() and "(ms)" in zoom.get_xlabel()


def test_back_to_back_gpu_steps_are_drawn_one_by_one() -> None:
    fig = plot_busy_timeline(_timeline(40, 0.0, 0.01, 0.0099))
    zoom = fig.axes[0]
    bars = [c for c in zoom.collections if c.get_label() == "forward"]
    assert len(bars) == 1 and len(bars[0].get_paths()) == 8
    edge, face = bars[0].get_edgecolor()[0], bars[0].get_facecolor()[0]
    assert tuple(edge[:3]) == (1.0, 1.0, 1.0) != tuple(face[:3]) and bars[0].get_linewidth()[0] > 0
    assert not any("too dense" in t.get_text() for t in zoom.texts)


def test_a_dense_gpu_row_says_so() -> None:
    zoom = plot_busy_timeline(_timeline(40, 0.0, 0.01, 1e-6)).axes[0]  # 1 µs steps in a 70 ms zoom
    assert any("GPU steps: too dense to draw" in t.get_text() for t in zoom.texts)


def test_zoom_never_spans_an_idle_gap() -> None:
    tl = _timeline(40, 0.0, 0.01, 0.0099, gap_after=21)
    steps = zoom_steps(tl)
    shown = tl[tl["step"].isin(steps)]
    assert len(steps) == 8 and shown["end"].max() - shown["start"].min() < 1.0


def _fake_result(seed: int) -> SimpleNamespace:
    """A RunResult's steps and requests, enough for the over-time plot."""
    rng = np.random.default_rng(seed)
    start = np.arange(50) * 0.02
    steps = pd.DataFrame(
        {
            "start": start,
            "end": start + 0.015,
            "num_prefill_tokens": rng.integers(0, 100, 50),
            "num_decode_tokens": rng.integers(0, 100, 50),
            "kv_usage": rng.random(50),
        }
    )
    return SimpleNamespace(steps=steps, requests=pd.DataFrame({"finish_time": rng.random(20)}))


def test_many_variants_get_small_multiples() -> None:
    many = {f"variant-{i}": _fake_result(i) for i in range(MAX_OVERLAID + 2)}
    fig = plot_over_time(many)
    assert len(fig.axes) == 3 * len(many)
    assert [ax.get_ylabel() for ax in fig.axes[::3]] == list(many)
    few = {f"v{i}": _fake_result(i) for i in range(2)}
    fig = plot_over_time(few)
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["v0", "v1"]


def test_sweep_lines_and_legend_entries_are_distinct() -> None:
    table = pd.DataFrame(
        {
            "policy": [f"p{i:02d}" for i in range(12) for _ in range(2)],
            "rate": [1, 2] * 12,
            "m": np.arange(24.0),
        }
    )
    ax = plot_metric_vs_knob(table, "rate", "m", ["policy"]).axes[0]
    looks = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in ax.lines}
    assert len(looks) == len(ax.lines) == 12
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == len(set(labels)) == 12


def test_distinct_legend_lists_each_label_once() -> None:
    ax = Figure().subplots()
    for _ in range(3):
        ax.plot([0, 1], [0, 1], label="same")
    ax.plot([0, 1], [1, 0], label="other")
    distinct_legend(ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["same", "other"]


def test_counts_print_as_integers() -> None:
    table = pd.DataFrame(
        {
            "label": ["a", "b"],
            "policy": ["vllm", "vllm"],
            "num_steps": [65300, 68810],
            "num_requests": [3000, 3000],
            "p99_ttft_ms": [1.5, 2.5],
        }
    )
    text = format_side_by_side(table)
    assert "e+" not in text and "65,300" in text and "68,810" in text
    summary = format_summary({"num_steps": 14470.0, "gpu_busy_s": 18083.25, "p99_ttft_ms": 71.89})
    assert "14,470" in summary and "18,083" in summary and "71.89" in summary and "e+" not in summary
