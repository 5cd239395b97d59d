"""Table model: interpolation exact on grid points, monotone, warns once past the grid; selection."""

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.latency import StepShape, make_latency_model
from schedsim.latency.interp import Curve, ExtrapolationWarning, isotonic
from schedsim.latency.table import TableModel, TableProfile

grids = st.lists(
    st.tuples(st.integers(1, 5000), st.floats(1e-6, 1e-1)), min_size=2, max_size=30, unique_by=lambda p: p[0]
)


@settings(max_examples=40, deadline=None)
@given(grids, st.floats(1, 5000))
def test_curve_exact_on_grid_and_monotone_between(points, x):
    xs, ys = zip(*points, strict=True)
    curve = Curve(xs, ys, warn=False)
    fitted = dict(zip(sorted(xs), isotonic([y for _, y in sorted(points)]), strict=True))
    for gx, gy in fitted.items():
        assert curve(gx) == pytest.approx(gy, rel=1e-12)
    assert all(b >= a for a, b in zip(curve.ys, curve.ys[1:], strict=False))
    lo = max([g for g in curve.xs if g <= x], default=curve.xs[0])
    assert curve(lo) <= curve(x) + 1e-15
    assert curve(x) <= curve(x + 1.0) + 1e-15


def test_curve_keeps_monotone_data_exactly_and_pools_violations():
    assert Curve([1, 2, 4], [1.0, 2.0, 3.0])(2) == 2.0
    assert isotonic([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    with pytest.raises(ValueError, match="duplicate"):
        Curve([1, 1], [1.0, 2.0])


def test_curve_extrapolates_linearly_and_warns_once():
    curve = Curve([1, 10], [1.0, 10.0], name="op")
    with pytest.warns(ExtrapolationWarning, match="op: 20"):
        assert curve(20) == pytest.approx(20.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert curve(40) == pytest.approx(40.0)  # second time: no warning


def _synthetic_table(tp=1):
    roofline = make_latency_model("llama-2-7b", "h100-sxm", tp, kind="roofline", engine="none")
    ops = {
        op: Curve([1, 64, 512], [1e-5 * (i + 1), 2e-5 * (i + 1), 9e-5 * (i + 1)], op, warn=False)
        for i, op in enumerate(
            [
                "input_layernorm",
                "attn_pre_proj",
                "attn_rope",
                "attn_post_proj",
                "post_attention_layernorm",
                "mlp_up_proj",
                "mlp_act",
                "mlp_down_proj",
                "add",
                "emb",
            ]
        )
    }
    return TableModel(TableProfile("llama-2-7b", "h100-sxm", tp, ops, grid_max_tokens=512), roofline)


def test_table_step_uses_measured_ops_exactly_at_grid_points():
    model = _synthetic_table()
    layer = model.layer_ops(64)
    assert layer["attn_pre_proj"] == pytest.approx(4e-5)
    assert layer["mlp_up_proj"] == pytest.approx(12e-5)
    assert layer["kv_cache_save"] == pytest.approx(model.roofline.dense_ops(64)["kv_cache_save"])
    shape = StepShape(decodes=[(100, 0)] * 64)
    expected = (
        32 * sum(layer.values())
        + model.profile.ops["emb"](64)
        + 32 * model.roofline.decode_attention(shape.decodes, 0)
        + model.roofline.lm_head(64)
    )
    assert model.step_time(shape) == pytest.approx(expected, rel=1e-12)
    assert sum(model.breakdown(shape).values()) == pytest.approx(expected, rel=1e-12)


def test_table_warns_once_past_the_grid():
    model = _synthetic_table()
    with pytest.warns(ExtrapolationWarning, match="past the measured grid"):
        model.step_time(StepShape(prefills=[(1000, 0)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.step_time(StepShape(prefills=[(2000, 0)]))


def test_auto_selects_table_when_profiled_else_fitted_roofline():
    table = make_latency_model("llama-2-70b", "a100-80gb", 4)
    assert table.name == "table"
    d = table.describe()
    assert d["all_reduce"] == "measured" and "attn_decode" in d["ops_from_roofline"]
    fallback = make_latency_model("llama-3.1-8b", "h100-sxm", 1)
    assert fallback.name == "roofline"
    assert "shipped fit" in fallback.describe()["roofline"]["source"]
    h200 = make_latency_model("qwen2.5-7b", "h200", 1).describe()["roofline"]["source"]
    assert "h100-sxm for h200" in h200
    l40s = make_latency_model("llama-3.1-8b", "l40s", 1).describe()["roofline"]["source"]
    assert "priors" in l40s
    with pytest.raises(ValueError, match="no measured profile"):
        make_latency_model("llama-3.1-8b", "h100-sxm", 1, kind="table")


def test_profile_of_a_model_with_identical_layers_is_used():
    lm = make_latency_model("llama-3.1-70b", "a100-80gb", 4)
    assert lm.name == "table"
    # Llama-3-70B and Llama-2-70B share the layer shapes; the wider (32k-token) grid wins
    assert "measured on llama-3-70b" in lm.describe()["profile"]
    assert lm.describe()["grid_max_tokens"] == 32768
    assert "same layer shapes" in make_latency_model("llama-3.1-70b", "h100", 8).describe()["profile"]


def test_table_and_fitted_roofline_agree_within_a_factor():
    shape = StepShape(prefills=[(512, 0)], decodes=[(800, 0)] * 32)
    for model, gpu, tp in [
        ("llama-2-7b", "a100-80gb", 1),
        ("llama-3-70b", "a100-80gb", 8),
        ("codellama-34b", "h100-sxm", 2),
    ]:
        table = make_latency_model(model, gpu, tp, kind="table").step_time(shape)
        roof = make_latency_model(model, gpu, tp, kind="roofline").step_time(shape)
        assert 0.6 < table / roof < 1.6, (model, gpu, tp, table, roof)


def test_collectives_grow_with_message_size_and_vanish_at_tp1():
    tp8 = make_latency_model("llama-2-70b", "h100-sxm", 8, kind="table", engine="none")
    assert tp8.all_reduce(4096) > tp8.all_reduce(16) > 0
    tp1 = make_latency_model("llama-2-70b", "h100-sxm", 1, kind="table", engine="none")
    assert tp1.all_reduce(4096) == 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4000), st.integers(1, 500), st.integers(0, 64))
def test_real_table_model_is_monotone_in_work(tokens, extra, decodes):
    model = make_latency_model("llama-2-70b", "h100-sxm", 8, kind="table")
    base = StepShape(prefills=[(tokens, 0)], decodes=[(500, 0)] * decodes)
    more = StepShape(prefills=[(min(tokens + extra, 4096), 0)], decodes=[(500, 0)] * decodes)
    longer = StepShape(prefills=[(tokens, extra)], decodes=[(500 + extra, 0)] * decodes)
    assert model.step_time(more) >= model.step_time(base)
    assert model.step_time(longer) >= model.step_time(base)
