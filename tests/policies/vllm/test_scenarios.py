"""Scenario tests of the `vllm` policy with exact step plans (after vLLM's test_scheduler.py)."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus, StepResult
from support.vllm_helpers import EOS, fake_result, make, mkreq, step

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def test_admission_in_arrival_order():
    p = make()
    for i in range(10):
        p.add_request(mkreq(f"r{i}", 10, arrival=float(i)))
    plan = p.schedule()
    assert plan.new_req_ids == [f"r{i}" for i in range(10)]
    assert plan.num_scheduled_tokens == {f"r{i}": 10 for i in range(10)}
    assert [r.request_id for r in p.running] == [f"r{i}" for i in range(10)]
    assert p.get_request_counts() == (10, 0)


def test_max_num_active_seqs_caps_admission():
    p = make(max_num_active_seqs=3)
    for i in range(10):
        p.add_request(mkreq(f"r{i}", 10, arrival=float(i)))
    plan = p.schedule()
    assert plan.new_req_ids == ["r0", "r1", "r2"]
    assert p.get_request_counts() == (3, 7)


def test_long_prefill_threshold_splits_three_long_prompts():
    p = make(max_num_batched_tokens=1024, long_prefill_token_threshold=400)
    for i in range(3):
        p.add_request(mkreq(f"r{i}", 800, arrival=float(i)))
    plan1 = p.schedule()
    assert plan1.num_scheduled_tokens == {"r0": 400, "r1": 400, "r2": 224}
    p.update_from_output(plan1, fake_result(p, plan1))
    plan2 = p.schedule()
    assert plan2.num_scheduled_tokens == {"r0": 400, "r1": 400, "r2": 224}
    p.update_from_output(plan2, fake_result(p, plan2))
    assert [len(p.requests[f"r{i}"].output_token_ids) for i in range(3)] == [1, 1, 0]
    plan3 = p.schedule()
    assert plan3.num_scheduled_tokens == {"r0": 1, "r1": 1, "r2": 352}


def test_threshold_ignored_for_a_lone_request_and_adaptive_floor():
    p = make(max_num_batched_tokens=1024, long_prefill_token_threshold=400)
    p.add_request(mkreq("big", 2000))
    assert p.schedule().num_scheduled_tokens == {"big": 1024}
    q = make(
        max_num_batched_tokens=1024,
        long_prefill_token_threshold=100,
        long_prefill_token_threshold_adaptive=True,
    )
    q.add_request(mkreq("big", 2000))
    q.add_request(mkreq("small", 10, arrival=1.0))
    assert q.schedule().num_scheduled_tokens == {"big": 512, "small": 10}


def test_chunked_prefill_off_blocks_short_prompts_behind_long_one():
    cfg = dict(max_num_seqs=3, max_num_batched_tokens=1024, max_model_len=1024)
    p = make(enable_chunked_prefill=False, **cfg)
    for i, n in enumerate([800, 800, 10, 10]):
        p.add_request(mkreq(f"r{i}", n, arrival=float(i)))
    assert p.schedule().num_scheduled_tokens == {"r0": 800}
    q = make(enable_chunked_prefill=True, **cfg)
    for i, n in enumerate([800, 800, 10, 10]):
        q.add_request(mkreq(f"r{i}", n, arrival=float(i)))
    assert q.schedule().num_scheduled_tokens == {"r0": 800, "r1": 224}


def test_preempt_last_running_when_decode_needs_block_stale_token_delivered():
    # Two steps in flight (as vLLM's PP test): r1's step is still running when r0 needs block 6.
    p = make(max_num_batched_tokens=100, num_gpu_blocks=11, max_model_len=160)
    p.add_request(mkreq("r0", 80))
    plan0 = p.schedule()
    p.add_request(mkreq("r1", 80, arrival=1.0))
    plan1 = p.schedule()
    assert plan0.num_scheduled_tokens == {"r0": 80} and plan1.num_scheduled_tokens == {"r1": 80}
    p.update_from_output(plan0, fake_result(p, plan0, 100))
    plan2 = p.schedule()
    assert plan2.num_scheduled_tokens == {"r0": 1} and plan2.preempted_req_ids == ["r1"]
    r1 = p.requests["r1"]
    assert r1.status == RequestStatus.PREEMPTED and r1.num_stale_output_tokens == 80
    assert [r.request_id for r in p.running] == ["r0"]
    outs = p.update_from_output(plan1, StepResult(sampled_token_ids={"r1": [42]}))
    assert r1.output_token_ids == [42] and outs[0].stale
    assert r1.num_stale_output_tokens == 0 and r1.num_computed_tokens == 0
    p.check_invariants()


def test_priority_preemption_picks_greatest_priority_then_arrival():
    p = make(
        scheduling_policy="priority", num_gpu_blocks=6, max_model_len=64, max_num_batched_tokens=256
    )  # 5 usable blocks
    p.add_request(mkreq("r_low", 32, priority=5, arrival=0.0))
    step(p)
    p.add_request(mkreq("r_mid", 32, priority=1, arrival=1.0))
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"r_low": 1, "r_mid": 32}
    assert [r.request_id for r in p.running] == ["r_low", "r_mid"]
    # r_mid's decode needs a 3rd block: r_low, earlier in running and already scheduled this
    # step, is the (priority, arrival)-greatest victim and gives its budget back.
    plan, _ = step(p)
    assert plan.preempted_req_ids == ["r_low"]
    assert plan.num_scheduled_tokens == {"r_mid": 1}
    assert p.requests["r_low"].status == RequestStatus.PREEMPTED


def test_no_priority_preemption_when_space_is_available():
    p = make(scheduling_policy="priority", num_gpu_blocks=20, max_model_len=64)
    p.add_request(mkreq("r_low", 32, priority=5))
    step(p)
    p.add_request(mkreq("r_hi", 32, priority=0, arrival=1.0))
    plan, _ = step(p)
    assert plan.preempted_req_ids == [] and plan.num_scheduled_tokens == {"r_low": 1, "r_hi": 32}


def test_stop_on_eos_and_stop_token_and_max_tokens_trimmed():
    p = make(num_spec_tokens=3)
    p.add_request(mkreq("eos", 8, max_tokens=10))
    p.add_request(mkreq("stop", 8, max_tokens=10, stop_token_ids=(42,)))
    p.add_request(mkreq("cap", 8, max_tokens=2))
    plan = p.schedule()
    outs = p.update_from_output(
        plan, fake_result(p, plan, tokens={"eos": [EOS], "stop": [10, 42, 11], "cap": [5, 6, 7]})
    )
    by = {o.request_id: o for o in outs}
    assert by["eos"].finish_reason == RequestStatus.FINISHED_STOPPED and by["eos"].new_token_ids == [EOS]
    assert by["stop"].new_token_ids == [10, 42] and by["stop"].finish_reason == RequestStatus.FINISHED_STOPPED
    assert by["cap"].new_token_ids == [5, 6]
    assert by["cap"].finish_reason == RequestStatus.FINISHED_LENGTH_CAPPED
    assert not p.running and p.schedule().finished_req_ids == ["eos", "stop", "cap"]
    p.check_invariants()


def test_stop_on_max_model_len():
    p = make(max_model_len=12, num_gpu_blocks=20)
    p.add_request(mkreq("r", 10, max_tokens=50))
    lens = []
    for _ in range(5):
        plan, outs = step(p)
        lens.append(plan.num_scheduled_tokens.get("r"))
        if outs and outs[0].finish_reason is not None:
            break
    assert lens == [10, 1] and outs[0].finish_reason == RequestStatus.FINISHED_LENGTH_CAPPED


def test_fully_scheduled_prompt_gets_nothing_while_another_is_admitted():
    p = make(max_num_seqs=2)
    p.add_request(mkreq("r0", 512))
    plan0 = p.schedule()
    p.add_request(mkreq("r1", 512, arrival=1.0))
    plan1 = p.schedule()
    assert plan0.num_scheduled_tokens == {"r0": 512} and plan1.num_scheduled_tokens == {"r1": 512}
    p.update_from_output(plan0, fake_result(p, plan0))
    plan2 = p.schedule()
    assert plan2.num_scheduled_tokens == {"r0": 1}  # r1 still in flight: 0 new tokens, skipped


def test_drafts_dropped_for_prefill_chunks():
    p = make(max_num_batched_tokens=50, num_spec_tokens=3, spec_method="ngram")  # no draft slot
    p.add_request(mkreq("r", 80))
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"r": 50}
    p.update_from_output(plan, fake_result(p, plan))
    p.update_draft_token_ids({"r": [1, 2, 3]})  # proposed after a prefill chunk: dropped
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"r": 30} and plan.spec_decode_tokens == {}
    p.update_from_output(plan, fake_result(p, plan))
    p.update_draft_token_ids({"r": [1, 2, 3]})
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"r": 4} and plan.spec_decode_tokens == {"r": [1, 2, 3]}
    # one draft accepted: two tokens delivered, two rejected positions rolled back
    p.update_from_output(plan, fake_result(p, plan, tokens={"r": [1, 9]}))
    r = p.requests["r"]
    assert r.output_token_ids == [100, 1, 9] and r.num_computed_tokens == 82


def test_identical_prompts_in_one_step_share_blocks():
    p = make()
    p.add_request(mkreq("a", 100, tok=7))
    p.add_request(mkreq("b", 100, tok=7, arrival=1.0))
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"a": 100, "b": 4}
    assert plan.context_lens == {"a": 0, "b": 96}
    assert plan.block_ids["a"][:6] == plan.block_ids["b"][:6]
    assert plan.block_ids["a"][6] != plan.block_ids["b"][6]
    p.check_invariants()


def test_recompute_counters_after_preemption():
    p = make(max_num_batched_tokens=100, num_gpu_blocks=11, max_model_len=160, enable_prefix_caching=False)
    p.add_request(mkreq("r0", 80))
    plan0 = p.schedule()
    p.add_request(mkreq("r1", 80, arrival=1.0))
    plan1 = p.schedule()
    p.update_from_output(plan0, fake_result(p, plan0))
    plan2 = p.schedule()
    assert plan2.preempted_req_ids == ["r1"]
    p.update_from_output(plan1, fake_result(p, plan1))
    p.update_from_output(plan2, fake_result(p, plan2))
    p.abort_requests(["r0"])
    plan3 = p.schedule()
    assert plan3.resumed_req_ids == ["r1"] and plan3.num_scheduled_tokens == {"r1": 81}
    r1 = p.requests["r1"]
    assert r1.num_preemptions == 1 and r1.num_recomputed_tokens == 80


def test_failed_kv_load_discards_output_and_recomputes():
    p = make()
    p.add_request(mkreq("a", 40, tok=3))
    step(p)
    p.add_request(mkreq("b", 40, tok=3, arrival=1.0))  # 32 tokens hit a's cached blocks
    plan = p.schedule()
    assert plan.context_lens["b"] == 32 and plan.num_scheduled_tokens["b"] == 8
    res = fake_result(p, plan)
    res.failed_kv_load_ids.add("b")
    outs = p.update_from_output(plan, res)
    assert [o.request_id for o in outs] == ["a"]
    b = p.requests["b"]
    assert b.output_token_ids == [] and b.num_computed_tokens == 0
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"a": 1, "b": 40} and plan.context_lens["b"] == 0
    assert b.num_recomputed_tokens == 40 and b.output_token_ids == [100]
