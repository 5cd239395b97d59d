"""The Policy adapter: registration, plan contents, stop checks, pause and resume end to end."""

from __future__ import annotations

import pytest
from schedsim.policies import Policy, RequestStatus, StepResult, get_policy_info, make_policy
from schedsim.policies.trtllm import LlmRequestState, TrtllmConfig
from support.trtllm_driver import make_request, oracle, run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

NAMES = ["trtllm:max-requests", "trtllm:guaranteed-no-evict", "trtllm:static-batch", "trtllm:max-utilization"]


def small(name: str = "trtllm:guaranteed-no-evict", **kw):
    opts = dict(num_gpu_blocks=64, block_size=16, max_model_len=512, max_num_batched_tokens=256)
    opts.update(kw)
    return make_policy(name, **opts)


@pytest.mark.parametrize("name", NAMES)
def test_every_name_is_registered_and_satisfies_the_protocol(name):
    info = get_policy_info(name)
    assert info.config_cls is TrtllmConfig
    policy = small(name)
    assert isinstance(policy, Policy) and policy.max_concurrent_batches == 1


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="chunking_policy"):
        TrtllmConfig(chunking_policy="round-robin")
    with pytest.raises(ValueError, match="max_input_len"):
        TrtllmConfig(max_model_len=100, max_input_len=100)
    with pytest.raises(ValueError, match="chunk_unit_size"):
        TrtllmConfig(chunk_unit_size=0)
    with pytest.raises(ValueError, match="chunk_unit_size"):
        TrtllmConfig(chunk_unit_size=64, max_num_batched_tokens=32)
    with pytest.raises(ValueError, match="unknown option"):
        make_policy("trtllm:max-utilization", chunk_policy="fcfs")


def test_prompt_over_max_input_len_is_rejected_by_name():
    policy = small(max_input_len=100)
    with pytest.raises(ValueError, match="max_input_len"):
        policy.add_request(make_request("long", 101, 5))


def test_plan_carries_chunks_context_lengths_and_block_tables():
    policy = small(max_num_batched_tokens=64, chunking_policy="first-come-first-served")
    policy.add_request(make_request("A", 100, 3))
    plan = policy.schedule()
    assert plan.num_scheduled_tokens == {"A": 64} and plan.context_lens == {"A": 0}
    assert plan.new_req_ids == ["A"] and len(plan.block_ids["A"]) == 7  # whole prompt at first chunk
    policy.update_from_output(plan, oracle(policy, plan))
    plan = policy.schedule()
    assert plan.num_scheduled_tokens == {"A": 36} and plan.context_lens == {"A": 64} and not plan.new_req_ids
    out = policy.update_from_output(plan, oracle(policy, plan))
    assert [o.new_token_ids for o in out] == [[7]]
    assert policy.requests["A"].state is LlmRequestState.GENERATION_IN_PROGRESS
    plan = policy.schedule()
    assert plan.num_scheduled_tokens == {"A": 1} and plan.context_lens == {"A": 100}


def test_eos_and_length_cap_finish_and_free_kv():
    policy = small()
    log = run(policy, [(0, make_request("eos", 20, 3)), (0, make_request("cap", 20, 50, max_tokens=4))])
    assert log.finished == {
        "eos": RequestStatus.FINISHED_STOPPED,
        "cap": RequestStatus.FINISHED_LENGTH_CAPPED,
    }
    assert policy.kv.num_free_blocks == 63 and not policy.has_requests()


def test_finished_ids_are_reported_in_the_next_plan():
    policy = small()
    policy.add_request(make_request("one", 8, 1))
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))
    assert policy.has_requests() and not policy.has_unfinished_requests()
    assert policy.schedule().finished_req_ids == ["one"] and not policy.has_requests()


def test_abort_frees_kv_and_ignores_unknown_ids():
    policy = small()
    policy.add_request(make_request("a", 40, 10))
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))
    aborted = policy.abort_requests(["a", "nope"])
    assert [r.request_id for r in aborted] == ["a"] and aborted[0].status is RequestStatus.FINISHED_ABORTED
    assert policy.kv.num_free_blocks == 63
    policy.check_invariants()


def test_drafts_are_scheduled_with_the_generation_token_and_partly_accepted():
    policy = small()
    policy.add_request(make_request("s", 16, 10, num_spec_tokens=3))
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))
    policy.update_draft_token_ids({"s": [4, 4, 4, 4]})  # capped at the request's 3
    plan = policy.schedule()
    assert plan.num_scheduled_tokens == {"s": 4} and plan.spec_decode_tokens == {"s": [4, 4, 4]}
    policy.update_from_output(plan, StepResult(sampled_token_ids={"s": [4, 9]}))  # 1 accepted + bonus
    request = policy.requests["s"].request
    assert request.output_token_ids == [7, 4, 9] and request.num_computed_tokens == 18
    assert request.spec_token_ids == []  # the landed step consumed its drafts
    policy.check_invariants()


def test_a_landed_step_clears_spec_token_ids_a_request_brought_in():
    """Drafts attached before the request reached this policy (no update_draft_token_ids here)
    are consumed by its first sampling step all the same."""
    policy = small()
    carried = make_request("c", 16, 10)
    carried.spec_token_ids = [5, 5]
    policy.add_request(carried)
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))
    assert carried.output_token_ids == [7] and carried.spec_token_ids == []


def test_max_utilization_pauses_folds_and_resumes_with_recompute():
    policy = small("trtllm:max-utilization", num_gpu_blocks=9, max_input_len=60)  # 8 usable blocks
    arrivals = [(0, make_request("a", 40, 40)), (0, make_request("b", 40, 40))]
    log = run(policy, arrivals)
    assert log.finished == {"a": RequestStatus.FINISHED_STOPPED, "b": RequestStatus.FINISHED_STOPPED}
    paused = [rid for plan in log.plans for rid in plan.paused_req_ids]
    resumed = [rid for plan in log.plans for rid in plan.resumed_req_ids]
    assert paused and sorted(set(paused)) == sorted(set(resumed))
    requests = {r.request_id: r for _, r in arrivals}
    victim = requests[paused[0]]
    assert victim.num_pauses >= 1 and victim.num_recomputed_tokens > 0
    assert victim.num_truncated_tokens > 0  # its prompt + outputs exceeded max_input_len 60
    assert policy.stats.num_pauses == len(paused)
    assert all(len(r.output_token_ids) <= 40 for r in requests.values())
    delivered = {rid: 0 for rid in requests}
    for tokens in log.delivered:
        for rid, n in tokens.items():
            delivered[rid] += n
    # regenerated (truncated) positions are recomputed, not streamed to the client twice
    assert delivered == {rid: len(r.output_token_ids) for rid, r in requests.items()}


def test_failed_kv_load_of_a_first_chunk_gives_blocks_back_and_retries():
    policy = small()
    policy.add_request(make_request("f", 40, 3))
    plan = policy.schedule()
    outputs = policy.update_from_output(plan, StepResult(failed_kv_load_ids={"f"}))
    assert outputs == [] and policy.kv.num_free_blocks == 63
    policy.check_invariants()
    again = policy.schedule()
    assert again.num_scheduled_tokens == {"f": 40} and again.context_lens == {"f": 0}
