"""The roofline model: shapes that must cost more do, TP behaves, the fast path is exact."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.latency import RooflineModel, StepShape, get_gpu_spec, get_model_spec, make_latency_model


def roofline(model="llama-3.1-8b", gpu="h100-sxm", tp=1):
    return make_latency_model(model, gpu, tp, kind="roofline", engine="none")


def test_empty_step_costs_nothing():
    assert roofline().step_time(StepShape()) == 0.0


def test_breakdown_sums_to_step_time_with_drafts():
    lm = roofline()
    shape = StepShape(prefills=[(300, 100), (64, 0)], decodes=[(900, 0), (40, 3), (7, 1)])
    assert sum(lm.breakdown(shape).values()) == pytest.approx(lm.step_time(shape), rel=1e-12)
    assert lm.breakdown(shape)["attn_decode"] > 0


@pytest.mark.parametrize("kind", ["auto", "roofline"])
def test_tp8_prefill_faster_decode_gains_less(kind):
    prefill = StepShape(prefills=[(4096, 0)])
    decode = StepShape(decodes=[(512, 0)] * 8)
    tp1 = make_latency_model("llama-2-70b", "h100-sxm", 1, kind=kind)
    tp8 = make_latency_model("llama-2-70b", "h100-sxm", 8, kind=kind)
    speed_prefill = tp1.step_time(prefill) / tp8.step_time(prefill)
    speed_decode = tp1.step_time(decode) / tp8.step_time(decode)
    assert speed_prefill > 4
    # decode is weight-bandwidth bound, and pays 2 all-reduce latencies and launches per layer
    assert 1 < speed_decode < speed_prefill


def test_faster_gpu_is_faster():
    shape = StepShape(prefills=[(2048, 0)], decodes=[(1000, 0)] * 32)
    a100 = roofline(gpu="a100-80gb").step_time(shape)
    assert roofline(gpu="h100-sxm").step_time(shape) < a100
    assert roofline(gpu="h200").step_time(shape) <= roofline(gpu="h100-sxm").step_time(shape)


def test_lm_head_only_for_sampled_tokens():
    lm = roofline()
    one = lm.breakdown(StepShape(prefills=[(1024, 0)]))["lm_head"]
    assert one == pytest.approx(lm.lm_head(1))
    assert lm.breakdown(StepShape(decodes=[(10, 0)] * 64))["lm_head"] == pytest.approx(lm.lm_head(64))


def test_invalid_tp_rejected():
    with pytest.raises(ValueError, match="tp"):
        RooflineModel(get_model_spec("tiny"), get_gpu_spec("h100"), tp=0)
    with pytest.raises(ValueError, match="kind"):
        make_latency_model("tiny", "h100", kind="magic")


shapes = st.builds(
    StepShape,
    prefills=st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 8192)), max_size=4),
    decodes=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 3)), max_size=64),
)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 512), st.integers(1, 512))
def test_more_work_never_costs_less(shape, extra_tokens, extra_ctx):
    lm = roofline()
    base = lm.step_time(shape)
    more_prefill = StepShape(prefills=shape.prefills + [(extra_tokens, 0)], decodes=shape.decodes)
    longer = StepShape(prefills=shape.prefills, decodes=[(c + extra_ctx, k) for c, k in shape.decodes])
    assert lm.step_time(more_prefill) > base
    assert lm.step_time(longer) >= base
    assert sum(lm.breakdown(shape).values()) == pytest.approx(base, rel=1e-12)
