"""Speculative decoding and structured output in the simulated world (vLLM 0.33.0's timing rules).

The scheduler's side (draft slot, lookahead, padding, grammar gating) is pinned against vLLM's own
scheduler in tests/conformance/test_vllm_spec.py; here: what the world does with
it. The worker verifies only drafts it holds, deferred sampling holds the GPU, the draft model's
passes (the extra input slot among them) are timed, the new RunConfig fields, and exact
fast-forward with all of it.
"""

from __future__ import annotations

import pytest
from schedsim import RunConfig, simulate
from schedsim.latency.base import StepShape
from schedsim.policies import Request, StepPlan, StepResult, make_policy
from schedsim.run.workload import prepare
from schedsim.worlds.executor import SimExecutor, SimStep
from schedsim.worlds.oracle import WorkloadOracle, verifiable_drafts
from support.fastforward import assert_same


class _Flat:
    """A latency model: 1 ms per step plus 0.1 ms per token."""

    name = "flat"

    def step_time(self, shape: StepShape) -> float:
        return 1e-3 + 1e-4 * shape.num_tokens

    def describe(self) -> dict:
        return {"kind": self.name}


def test_verifiable_drafts_rule() -> None:
    assert verifiable_drafts([7, 8, 9], False) == 3  # sync: real drafts
    assert verifiable_drafts([7, 8, -1], False) == 2  # a grammar-invalid tail
    assert verifiable_drafts([-1, -1], False) == 0  # a padded admission
    assert verifiable_drafts([-1, -1, -1], True) == 3  # async: the worker holds its drafts
    assert verifiable_drafts([], True) == 0


def _executor(rate: float) -> tuple[SimExecutor, Request]:
    oracle = WorkloadOracle(seed=1, acceptance_rate=rate)
    req = Request("r", 0.0, prompt_len=8, max_tokens=50, num_spec_tokens=2)
    oracle.add("r", 40)
    return SimExecutor(oracle, _Flat(), propose_drafts=False), req


def _plan(step: int, ctx: int, spec: list[int]) -> StepPlan:
    n = 1 + len(spec)
    return StepPlan(
        step_id=step,
        num_scheduled_tokens={"r": n},
        total_num_scheduled_tokens=n,
        context_lens={"r": ctx},
        spec_decode_tokens={"r": spec} if spec else {},
    )


def test_placeholders_are_accepted_only_after_the_batch_right_before() -> None:
    ex, req = _executor(rate=1.0)  # every draft the worker holds is accepted
    reqs = {"r": req}
    req.output_token_ids = [5]  # prefilled, first token delivered
    assert ex.launch(_plan(0, 8, []), reqs, step=0).result.sampled_token_ids["r"] == [ex.oracle.token(req, 1)]
    # the batch right before sampled: its placeholders stand for real drafts, all accepted
    assert len(ex.launch(_plan(1, 9, [-1, -1]), reqs, step=1).result.sampled_token_ids["r"]) == 3
    # it skipped batch 2: at batch 3 the worker has no drafts for it
    h = ex.launch(_plan(3, 12, [-1, -1]), reqs, step=3)
    assert len(h.result.sampled_token_ids["r"]) == 1
    assert (h.num_decode_reqs, h.num_spec_tokens) == (1, 2)  # its 1 + k positions still computed


def test_padded_admission_accepts_nothing_and_is_a_uniform_decode() -> None:
    ex, _ = _executor(rate=1.0)
    one = Request("one", 0.0, prompt_len=1, max_tokens=5, num_spec_tokens=2)
    ex.oracle.add("one", 4)
    plan = StepPlan(
        step_id=0,
        num_scheduled_tokens={"one": 3},
        total_num_scheduled_tokens=3,
        context_lens={"one": 0},
        spec_decode_tokens={"one": [-1, -1]},
        new_req_ids=["one"],
    )
    h = ex.launch(plan, {"one": one}, step=0)
    assert h.result.sampled_token_ids["one"] == [ex.oracle.token(one, 0)]
    assert (h.num_decode_reqs, h.num_prefill_reqs, h.num_decode_tokens) == (1, 0, 3)


def test_draft_model_passes_are_timed_after_a_deferred_sample() -> None:
    ex, req = _executor(rate=0.0)
    ex.draft_latency_model, ex.num_spec_tokens = _Flat(), 2
    req.output_token_ids = [5]
    h = ex.launch(_plan(0, 8, [-1, -1]), {"r": req}, step=0)
    # first pass: 3 tokens + 1 slot; then one 1-token pass (k - 1 = 1)
    assert h.draft_time == pytest.approx((1e-3 + 4e-4) + (1e-3 + 1e-4))
    assert h.gpu_time == pytest.approx(1e-3 + 3e-4 + h.draft_time)


def _small(**kw) -> RunConfig:
    base = dict(
        trace="azure-conv-2023",
        max_requests=40,
        rate=8.0,
        model="llama-3.1-8b",
        gpu="h100-sxm",
        num_gpu_blocks=3000,
        max_model_len=4096,
        seed=3,
    )
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize(
    "kw",
    [
        dict(policy="vllm", num_spec_tokens=3, structured_fraction=0.5, draft_model="tiny"),
        dict(policy="vllm", num_spec_tokens=2, spec_method="ngram", structured_fraction=0.3),
        dict(policy="vllm-async", num_spec_tokens=3, structured_fraction=0.5),
        dict(policy="vllm-async", structured_fraction=0.5, cpu_cost_scale=8.0),
        dict(policy="vllm-async", num_spec_tokens=2, num_gpu_blocks=300, max_model_len=2048),
    ],
)
def test_fast_forward_stays_exact_with_drafts_and_grammars(kw) -> None:
    assert_same(_small(**kw))


def test_structured_batches_are_deferred_and_hold_the_gpu() -> None:
    plain = simulate(_small(policy="vllm-async", cpu_cost_scale=20.0))
    so = simulate(_small(policy="vllm-async", cpu_cost_scale=20.0, structured_fraction=1.0))
    assert plain.steps["deferred_sampling"].sum() == 0
    deferred = so.steps[so.steps["deferred_sampling"] == 1]
    assert len(deferred) > len(so.steps) / 2  # every decode step after a request's first
    # a deferred step ends only after its release: later than its modelled GPU time
    assert ((deferred["end"] - deferred["start"]) > deferred["gpu_time"] + 1e-12).any()
    assert so.summary["gpu_idle_fraction"] > plain.summary["gpu_idle_fraction"]


def test_draft_model_costs_budget_and_kv_that_ngram_does_not() -> None:
    kw = dict(policy="vllm", num_spec_tokens=3, max_num_batched_tokens=64, max_num_seqs=64)
    dm = simulate(_small(spec_method="draft_model", **kw))
    ng = simulate(_small(spec_method="ngram", **kw))
    # the same first step: a prompt chunk gets budget - 1 with draft_model (its input slot)
    first_dm, first_ng = dm.steps.iloc[0], ng.steps.iloc[0]
    assert first_ng["num_prefill_tokens"] == 64 and first_dm["num_prefill_tokens"] == 63
    assert dm.steps["kv_usage"].iloc[:5].to_list() >= ng.steps["kv_usage"].iloc[:5].to_list()


def test_structured_fraction_marks_a_seeded_share_of_requests() -> None:
    import pandas as pd

    df = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(2000)],
            "arrival_time": [0.0] * 2000,
            "prompt_tokens": [10] * 2000,
            "output_tokens": [5] * 2000,
        }
    )
    prep = prepare(df, RunConfig(structured_fraction=0.25, seed=4), max_model_len=100)
    assert 0.22 < prep.structured.mean() < 0.28
    again = prepare(df, RunConfig(structured_fraction=0.25, seed=4), max_model_len=100)
    assert (prep.structured == again.structured).all()
    assert not prepare(df, RunConfig(), max_model_len=100).structured.any()


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(spec_method="eagle"), "spec_method"),
        (dict(structured_fraction=1.5), "structured_fraction"),
        (dict(draft_model="tiny"), "draft_model"),
        (dict(draft_model="tiny", num_spec_tokens=2, spec_method="ngram"), "draft_model"),
    ],
)
def test_run_config_fields_are_validated(kw, field) -> None:
    with pytest.raises(ValueError, match=field):
        RunConfig(**kw)


def test_ngram_is_refused_with_async_scheduling() -> None:
    with pytest.raises(ValueError, match="spec_method"):
        make_policy("vllm-async", num_spec_tokens=2, spec_method="ngram")
    with pytest.raises(ValueError, match="num_lookahead_tokens"):
        make_policy("vllm", num_spec_tokens=4, max_num_batched_tokens=4, max_num_seqs=4)
    assert (
        make_policy(
            "vllm", num_spec_tokens=4, spec_method="ngram", max_num_batched_tokens=4, max_num_seqs=4
        ).draft_slots
        == 0
    )


def test_a_step_without_a_draft_model_has_no_draft_time() -> None:
    h = SimStep(0, StepPlan(), StepResult(), 1.0)
    assert h.draft_time == 0.0 and h.defer_sampling is False
    ex, req = _executor(rate=1.0)
    req.output_token_ids = [5]
    assert ex.launch(_plan(0, 8, [-1, -1]), {"r": req}, step=0).draft_time == 0.0


def test_bitmask_is_filled_before_the_step_samples() -> None:
    so = simulate(_small(policy="vllm", structured_fraction=1.0, cpu_cost_scale=50.0, max_requests=10))
    plain = simulate(_small(policy="vllm", cpu_cost_scale=50.0, max_requests=10))
    cpu = so.timeline[so.timeline["resource"] == "cpu"]
    prep = cpu[cpu["kind"] == "prepare_inputs"].groupby("step")
    ran = so.steps[so.steps["num_prefill_tokens"] + so.steps["num_decode_tokens"] > 0]
    sizes = prep.size().loc[ran["step"]]
    assert (sizes == 2).all()  # input preparation, then the bitmask (shown as input preparation)
    bitmask_end = prep["end"].max()
    steps = so.steps.set_index("step")
    assert (steps.loc[bitmask_end.index, "end"] >= bitmask_end).all()  # sampling waited for it
    assert (steps["end"] - steps["start"] > steps["gpu_time"] + 1e-12).any()  # the bitmask was longer
    plain_cpu = plain.timeline[plain.timeline["resource"] == "cpu"]
    assert (plain_cpu[plain_cpu["kind"] == "prepare_inputs"].groupby("step").size() == 1).all()
    assert so.steps["deferred_sampling"].sum() == 0  # sync steps are never deferred


def test_cpu_cost_file_without_the_bitmask_phase_keeps_its_default(tmp_path) -> None:
    import json

    from schedsim.latency.cpu_cost import CpuCostModel, load_cpu_cost

    path = tmp_path / "cpu.json"
    phases = {k: {"base": 1e-4} for k in ("schedule", "update_from_output", "prepare_inputs", "d2h_copy")}
    path.write_text(json.dumps({"kind": "cpu-cost", "phases": phases}))
    model = load_cpu_cost(str(path))
    assert model.phase_time("grammar_bitmask", 2, 8) == CpuCostModel().phase_time("grammar_bitmask", 2, 8)
    assert model.phase_time("grammar_bitmask", 2, 8) == pytest.approx(10e-6 + 8 * 40e-6)
    assert model.step_total(1, 1) == pytest.approx(4e-4)  # the four phases every step has
