"""Overhead terms: collectives by TP, CUDA-graph launch floor, sampler, CPU phases by engine, explain."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.fastforward.timeline import DecodeTimes
from schedsim.latency import CpuCostModel, StepShape, make_latency_model
from schedsim.latency.engines import ENGINE_PROFILES, EngineProfile, OverheadTerms, resolve_terms
from schedsim.latency.explain import explain_step
from schedsim.latency.factory import make_cpu_cost_model
from schedsim.latency.overhead import OverheadModel, cpu_cost_config
from support.schedloop import running_requests


def _model(engine="vllm", model="llama-2-70b", gpu="h100-sxm", tp=8, kind="auto", **terms):
    bare = make_latency_model(model, gpu, tp, kind, engine="none")
    base = resolve_terms(engine, bare.roofline.gpu.name if hasattr(bare, "roofline") else gpu)
    fields = {
        **{
            k: getattr(base, k)
            for k in (
                "kernel_scale",
                "allreduce_latency_us",
                "allreduce_growth",
                "launch_us_per_layer",
                "tp_broadcast_us",
                "host_speed",
            )
        },
        **terms,
    }
    return OverheadModel(bare, OverheadTerms(engine=ENGINE_PROFILES[engine], **fields))


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0-eager", "vllm-v0-graph", "trtllm-cpp"])
@pytest.mark.parametrize("kind", ["roofline", "auto"])
@settings(max_examples=15, deadline=None)
@given(ctx=st.lists(st.integers(1, 8000), min_size=1, max_size=300), i=st.integers(0, 50))
def test_decode_closed_form_is_the_step_time_float(engine, kind, ctx, i):
    model = make_latency_model("llama-2-70b", "h100-sxm", 4, kind, engine=engine)
    expected = model.step_time(StepShape(decodes=[(c + i, 0) for c in ctx]))
    assert DecodeTimes(model, running_requests(ctx)).at(i) == expected  # the fast-forward's very float


def test_collective_latency_is_paid_per_all_reduce_and_grows_with_tp():
    shape = StepShape(decodes=[(500, 0)] * 8)
    slow, fast = _model(allreduce_latency_us=40.0), _model(allreduce_latency_us=0.0)
    layers = slow.layers
    # 2 all-reduces per layer + the logits gather, each 40 us at TP 8 with growth 0 -> 2 doublings
    grown = 40e-6 * (1 + slow.terms.allreduce_growth * 2)
    assert slow.step_time(shape) - fast.step_time(shape) == pytest.approx((2 * layers + 1) * grown)
    tp1 = make_latency_model("llama-2-7b", "h100-sxm", 1)
    assert tp1.collectives(64) == (0.0, 0.0) and tp1.logits_gather(8) == 0.0


def test_eager_steps_cannot_beat_the_host_launch_floor():
    eager = _model("vllm-v0-eager", launch_us_per_layer=500.0)
    graph = _model("vllm-v0-graph", launch_us_per_layer=500.0)
    decode = StepShape(decodes=[(200, 0)] * 4)
    floor = eager.layers * 500e-6
    assert eager.step_time(decode) == pytest.approx(floor)  # launch-bound: 80 layers x 0.5 ms
    assert graph.step_time(decode) < floor  # decode replays a CUDA graph
    prefill = StepShape(prefills=[(64, 0)])
    assert graph.step_time(prefill) == pytest.approx(floor)  # prefill steps run eagerly
    big = StepShape(decodes=[(200, 0)] * 300)  # past the 256-request capture size
    assert graph.step_time(big) >= floor


def test_piecewise_graphs_cover_steps_up_to_the_capture_size_in_tokens():
    v1 = ENGINE_PROFILES["vllm"]
    assert not v1.eager(512, False) and v1.eager(513, False) and not v1.eager(64, True)
    v0 = ENGINE_PROFILES["vllm-v0-graph"]
    assert v0.eager(8, False) and not v0.eager(256, True) and v0.eager(257, True)
    with pytest.raises(ValueError, match="cuda_graphs"):
        EngineProfile("x", "", cuda_graphs="sometimes")
    with pytest.raises(ValueError, match="allreduce_latency_us"):
        OverheadTerms(engine=v1, allreduce_latency_us=-1.0)


def test_kernel_scale_multiplies_kernels_but_not_overheads():
    shape = StepShape(prefills=[(256, 0)], decodes=[(300, 0)] * 4)
    one, two = (
        _model(kernel_scale=1.0, launch_us_per_layer=0.0),
        _model(kernel_scale=2.0, launch_us_per_layer=0.0),
    )
    bare = one.inner.step_time(shape) - one.inner.collective_time(shape.num_tokens)
    assert two.step_time(shape) - one.step_time(shape) == pytest.approx(bare)


@pytest.mark.parametrize("engine,tp", [("vllm", 8), ("vllm-v0-eager", 8), ("trtllm-cpp", 1)])
@pytest.mark.parametrize(
    "shape",
    [
        StepShape(decodes=[(900, 0)] * 16),
        StepShape(prefills=[(4096, 0)]),
        StepShape(prefills=[(300, 100)], decodes=[(50, 2)] * 3),
    ],
)
def test_explain_terms_and_breakdown_sum_to_the_step_time(engine, tp, shape):
    model = make_latency_model("llama-2-70b" if tp > 1 else "llama-2-7b", "a100-80gb", tp, engine=engine)
    terms = explain_step(model, shape)
    assert set(terms) == {"compute", "memory", "kernel_fixed", "collectives", "sampler", "launch_floor"}
    assert sum(terms.values()) == pytest.approx(model.step_time(shape), rel=1e-9)
    assert sum(model.breakdown(shape).values()) == pytest.approx(model.step_time(shape), rel=1e-9)
    assert all(v >= 0 for v in terms.values())


def test_explain_attributes_big_prefills_to_compute_and_decodes_to_memory():
    model = make_latency_model("llama-2-7b", "h100-sxm", 1)
    pre = explain_step(model, StepShape(prefills=[(4096, 0)]))
    dec = explain_step(model, StepShape(decodes=[(500, 0)] * 4))
    assert pre["compute"] > pre["memory"] and dec["memory"] > dec["compute"]


def test_default_engine_keeps_the_cpu_cost_defaults_and_adds_the_tp_broadcast():
    default = CpuCostModel()
    tp1 = make_cpu_cost_model("h100-sxm", 1)
    assert all(
        tp1.phase_time(k, 37, 900) == default.phase_time(k, 37, 900)
        for k in ("schedule", "prepare_inputs", "d2h_copy", "update_from_output")
    )
    tp8 = make_cpu_cost_model("h100-sxm", 8)
    extra = tp8.phase_time("prepare_inputs", 4, 4) - tp1.phase_time("prepare_inputs", 4, 4)
    assert extra == pytest.approx(resolve_terms("vllm", "h100-sxm").tp_broadcast_us * 1e-6)
    assert tp8.phase_time("schedule", 4, 4) == tp1.phase_time("schedule", 4, 4)


def test_fitted_engine_cpu_terms_rescale_the_phases():
    terms = resolve_terms("vllm-v0-eager", "h100-sxm")
    cpu = CpuCostModel(cpu_cost_config(terms), tp=2)
    # all four phases of a step with 10 requests and 10 tokens sum to the fitted host terms
    expected = (terms.step_us + 10 * terms.per_request_us + terms.tp_broadcast_us) * 1e-6 + 10 * 0.02e-6
    assert cpu.step_total(10, 10) == pytest.approx(expected)
    a100 = resolve_terms("vllm-v0-eager", "a100-80gb")
    assert a100.step_us == pytest.approx(terms.step_us * a100.host_speed)  # slower A100-era hosts


def test_engine_none_gives_the_bare_gpu_model_and_unknown_engines_fail():
    assert not isinstance(make_latency_model("llama-2-7b", "h100", 1, engine="none"), OverheadModel)
    with pytest.raises(ValueError, match="unknown engine"):
        make_latency_model("llama-2-7b", "h100", 1, engine="warp-drive")
    described = make_latency_model("llama-2-7b", "h100", 2).describe()
    assert described["overhead"]["engine"] == "vllm"
    assert "overhead_fit.json" in described["overhead"]["sources"]["allreduce_latency_us"]
