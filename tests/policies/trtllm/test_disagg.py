"""TensorRT-LLM's disaggregated request states, each side of a prefill/decode pair driven by hand.

Every plan is pinned: the decode side's DISAGG_GENERATION_INIT -> TRANS_IN_PROGRESS -> TRANS_COMPLETE
-> generation, the prefill side's context phase -> DISAGG_CONTEXT_TRANS_IN_PROGRESS -> blocks freed,
failed receives, aborts in each state, and where the capacity policies differ. Blocks: 16 tokens.
"""

from __future__ import annotations

import pytest
from schedsim.policies import RequestOutput, RequestStatus, SupportsKVTransfer
from schedsim.policies.trtllm import LlmRequestState
from support.trtllm_disagg import (
    FIRST,
    TOKEN,
    colocated,
    context_only,
    generation_only,
    policy,
    state,
    step,
)

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

KV_AWARE = ["trtllm:guaranteed-no-evict", "trtllm:static-batch", "trtllm:max-utilization"]
INIT, RECV, DONE = (
    "DISAGG_GENERATION_INIT",
    "DISAGG_GENERATION_TRANS_IN_PROGRESS",
    "DISAGG_GENERATION_TRANS_COMPLETE",
)


def outs(outputs: list[RequestOutput]) -> list[tuple[str, list[int], RequestStatus | None]]:
    """Outputs as comparable tuples."""
    return [(o.request_id, o.new_token_ids, o.finish_reason) for o in outputs]


# ---- decode side ----
@pytest.mark.parametrize("name", KV_AWARE)
def test_generation_only_receives_then_generates(name):
    p = policy(name)
    assert isinstance(p, SupportsKVTransfer) and p.decode_takes_prefill_token()
    p.add_request(generation_only("G", 40, 4))
    assert state(p) == {} and not p.has_kv_transfers_in_flight()

    # admitted as fitting disagg-gen-init: 3 blocks for the 40-token prompt, receive started
    plan, out = step(p)
    assert plan.num_scheduled_tokens == {} and plan.kv_reqs_to_recv == {"G": 40} and not plan.new_req_ids
    assert state(p) == {"G": RECV} and p.kv.num_blocks_of("G") == 3 and p.kv.num_free_blocks == 60
    assert p.has_kv_transfers_in_flight() and out == [] and p.get_request_counts() == (0, 1)

    # the transfer runs: nothing to schedule, and that is no wedge
    plan, out = step(p, recv={"G"})
    assert plan.num_scheduled_tokens == {} and plan.kv_reqs_to_recv == {} and out == []
    assert state(p) == {"G": DONE} and not p.has_kv_transfers_in_flight()
    assert p.requests["G"].request.num_computed_tokens == 40

    # the first batch that schedules it appends the context phase's token and computes its KV
    plan, out = step(p)
    assert plan.num_scheduled_tokens == {"G": 1} and plan.context_lens == {"G": 40}
    assert plan.new_req_ids == ["G"] and plan.block_ids["G"] == p.kv.get_block_ids("G")
    assert outs(out) == [("G", [TOKEN], None)]  # the first token was delivered by the prefill side
    assert state(p) == {"G": "GENERATION_IN_PROGRESS"}
    assert p.requests["G"].request.output_token_ids == [FIRST, TOKEN]

    plan, out = step(p)
    assert plan.context_lens == {"G": 41} and outs(out) == [("G", [TOKEN], None)]
    plan, out = step(p)
    assert plan.context_lens == {"G": 42}
    assert outs(out) == [("G", [TOKEN], RequestStatus.FINISHED_LENGTH_CAPPED)]  # 4 tokens with FIRST
    plan, out = step(p)
    assert plan.finished_req_ids == ["G"] and p.kv.num_free_blocks == 63 and not p.has_requests()


def test_generation_only_without_its_first_token_gets_a_stand_in():
    p = policy()
    p.add_request(generation_only("G", 40, 3, first=False))
    step(p)
    step(p, recv={"G"})
    step(p)
    assert p.requests["G"].request.output_token_ids == [-1, TOKEN]


def test_receive_covers_only_what_block_reuse_does_not_hold():
    """Decode-side reuse: the prompt's stored full blocks are not received again."""
    p = policy()
    p.add_request(generation_only("G1", 56, 2, hashes=(1, 2, 3)))
    step(p)
    step(p, recv={"G1"})
    step(p)  # generates its last token and frees its blocks, stored for reuse
    p.add_request(generation_only("G2", 56, 2, hashes=(1, 2, 3)))
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == {"G2": 8}  # 3 full blocks reused; the partial block is unique
    assert p.requests["G2"].prepopulated_prompt_len == 48


# ---- prefill side ----
def test_context_only_holds_its_blocks_until_the_send_ends():
    p = policy()
    p.add_request(context_only("C", 40))
    plan, out = step(p)
    assert plan.num_scheduled_tokens == {"C": 40} and plan.new_req_ids == ["C"]
    assert outs(out) == [("C", [TOKEN], RequestStatus.FINISHED_LENGTH_CAPPED)]
    assert "C" not in p.requests and p.kv.num_blocks_of("C") == 3 and p.kv.num_free_blocks == 60
    assert p.has_kv_transfers_in_flight() and not p.has_unfinished_requests()
    assert p.transceiver.sending["C"].state is LlmRequestState.DISAGG_CONTEXT_TRANS_IN_PROGRESS

    plan, out = step(p)  # listed once, in the plan that reports the finish
    assert plan.finished_req_ids == ["C"] and plan.kv_reqs_to_send == {"C": 40} and out == []
    plan, out = step(p, sent={"C"})
    assert plan.kv_reqs_to_send == {} and plan.finished_req_ids == []
    assert p.kv.num_free_blocks == 63 and not p.has_kv_transfers_in_flight() and not p.has_requests()


def test_context_only_stops_after_the_context_phase_whatever_its_max_tokens():
    p = policy()
    request = context_only("C", 20)
    request.max_tokens = 50
    p.add_request(request)
    _, out = step(p)
    assert outs(out) == [("C", [TOKEN], RequestStatus.FINISHED_LENGTH_CAPPED)]


def test_blocks_held_for_a_send_are_reusable_by_the_next_context():
    p = policy()
    p.add_request(context_only("C1", 40, hashes=(1, 2)))
    step(p)
    p.add_request(context_only("C2", 40, hashes=(1, 2)))
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"C2": 8} and plan.kv_reqs_to_send == {"C1": 40}
    assert p.kv.num_free_blocks == 59  # C2 shares C1's 2 full blocks and adds 1
    step(p, sent={"C1", "C2"})
    assert p.kv.num_free_blocks == 63


def test_a_context_blocked_by_blocks_held_for_sends_waits_without_wedging():
    p = policy(num_gpu_blocks=6)  # 5 usable
    p.add_request(context_only("C1", 64))
    step(p)
    p.add_request(colocated("B", 32, 4))
    plan, _ = step(p)  # 4 blocks held by the send, B needs 3 to completion
    assert plan.num_scheduled_tokens == {} and state(p) == {"B": "CONTEXT_INIT"}
    plan, _ = step(p, sent={"C1"})
    assert plan.num_scheduled_tokens == {}
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"B": 32}


# ---- failures ----
def test_failed_receive_finishes_with_an_error_and_stores_nothing():
    p = policy()
    p.add_request(generation_only("G", 56, 8, hashes=(1, 2, 3)))
    step(p)
    plan, out = step(p, failed={"G"})
    assert outs(out) == [("G", [], RequestStatus.FINISHED_ERROR)]
    assert "G" not in p.requests and p.kv.num_free_blocks == 63 and not p.has_kv_transfers_in_flight()
    plan, _ = step(p)
    assert plan.finished_req_ids == ["G"]
    p.add_request(generation_only("G2", 56, 8, hashes=(1, 2, 3)))
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == {"G2": 56}  # nothing of the failed receive was reused


def test_a_failure_after_the_receive_is_a_failed_step_not_a_failed_transfer():
    p = policy()
    p.add_request(generation_only("G", 40, 8))
    step(p)
    step(p, recv={"G"})
    plan, out = step(p, failed={"G"})  # its first generation step failed to load: nothing computed
    assert plan.context_lens == {"G": 40} and out == []
    plan, out = step(p)
    assert plan.context_lens == {"G": 40} and outs(out) == [("G", [TOKEN], None)]
    assert p.requests["G"].request.output_token_ids == [FIRST, TOKEN]


# ---- aborts ----
def test_abort_in_disagg_generation_init_frees_nothing():
    p = policy(num_gpu_blocks=5)  # 4 usable: G1 reserves 3 to completion, G2 waits in INIT
    p.add_request(generation_only("G1", 40, 4))
    p.add_request(generation_only("G2", 40, 4))
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == {"G1": 40} and state(p) == {"G1": RECV, "G2": INIT}
    assert [r.request_id for r in p.abort_requests(["G2"])] == ["G2"]
    p.check_invariants()
    assert p.schedule().finished_req_ids == ["G2"] and p.kv.num_free_blocks == 1


def test_abort_while_receiving_keeps_the_blocks_until_the_transfer_ends():
    p = policy()
    p.add_request(generation_only("G", 40, 4))
    step(p)
    aborted = p.abort_requests(["G"])
    assert [r.status for r in aborted] == [RequestStatus.FINISHED_ABORTED]
    assert p.kv.num_blocks_of("G") == 3 and p.has_kv_transfers_in_flight()
    p.check_invariants()
    plan, _ = step(p)
    assert plan.finished_req_ids == ["G"] and p.kv.num_blocks_of("G") == 3
    step(p, recv={"G"})
    assert p.kv.num_free_blocks == 63 and not p.has_kv_transfers_in_flight()


def test_abort_while_receiving_then_failure_releases_the_blocks():
    p = policy()
    p.add_request(generation_only("G", 40, 4))
    step(p)
    p.abort_requests(["G"])
    _, out = step(p, failed={"G"})
    assert out == [] and p.kv.num_free_blocks == 63 and not p.has_kv_transfers_in_flight()


def test_abort_after_the_transfer_frees_at_once():
    p = policy()
    p.add_request(generation_only("G", 40, 4))
    step(p)
    step(p, recv={"G"})
    p.abort_requests(["G"])
    assert p.kv.num_free_blocks == 63 and not p.transceiver.complete
    p.check_invariants()


def test_abort_of_a_finished_context_only_request_changes_nothing():
    p = policy()
    p.add_request(context_only("C", 40))
    step(p)
    assert p.abort_requests(["C"]) == []
    assert p.kv.num_blocks_of("C") == 3 and p.has_kv_transfers_in_flight()
    step(p, sent={"C"})
    assert p.kv.num_free_blocks == 63


# ---- capacity policies ----
@pytest.mark.parametrize(
    ("name", "recv", "free"),
    [
        # no-evict reserves each to completion: ceil((64 + 64) / 16) = 8 of the 10 blocks
        ("trtllm:guaranteed-no-evict", {"G1": 64}, 6),
        ("trtllm:static-batch", {"G1": 64}, 6),
        # max-utilization reserves the next step only: the 4 prompt blocks
        ("trtllm:max-utilization", {"G1": 64, "G2": 64}, 2),
    ],
)
def test_disagg_generation_init_reservation(name, recv, free):
    p = policy(name, num_gpu_blocks=11)
    p.add_request(generation_only("G1", 64, 64))
    p.add_request(generation_only("G2", 64, 64))
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == recv and p.kv.num_free_blocks == free


@pytest.mark.parametrize(
    ("name", "scheduled", "recv"),
    [
        # no-evict's second pass takes the DISAGG_GENERATION_INIT requests before the contexts
        ("trtllm:guaranteed-no-evict", {}, {"G": 96}),
        ("trtllm:static-batch", {}, {"G": 96}),
        # max-utilization goes in arrival order: the context takes the blocks, G waits
        ("trtllm:max-utilization", {"C": 96}, {}),
    ],
)
def test_disagg_generation_init_against_an_earlier_context(name, scheduled, recv):
    p = policy(name, num_gpu_blocks=11)
    p.add_request(colocated("C", 96, 8))
    p.add_request(generation_only("G", 96, 8))
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == scheduled and plan.kv_reqs_to_recv == recv
    assert p.kv.num_free_blocks == 4


@pytest.mark.parametrize(
    ("name", "recv"),
    [
        ("trtllm:guaranteed-no-evict", {"G": 32}),
        ("trtllm:static-batch", {}),  # admits only into an empty batch: not while A generates
        ("trtllm:max-utilization", {"G": 32}),
    ],
)
def test_static_batch_admits_disagg_generation_init_only_into_an_empty_batch(name, recv):
    p = policy(name)
    p.add_request(colocated("A", 16, 8))
    step(p)
    p.add_request(generation_only("G", 32, 8))
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"A": 1} and plan.kv_reqs_to_recv == recv


def test_receiving_requests_take_active_slots_but_not_capacity():
    """max_batch_size 2: the receiving G holds an active slot (C2 waits in the executor queue), but the
    capacity scheduler skips it, so C1 runs."""
    p = policy(max_batch_size=2)
    p.add_request(generation_only("G", 32, 8))
    step(p)
    p.add_request(colocated("C1", 16, 4))
    p.add_request(colocated("C2", 16, 4))
    plan, _ = step(p)
    assert plan.num_scheduled_tokens == {"C1": 16} and [r.request_id for r in p.waiting] == ["C2"]
    assert [r.request_id for r in p.last_capacity.fitting] == ["C1"]


def test_max_utilization_pauses_a_received_request_as_a_started_one():
    """TRANS_COMPLETE counts as a generation: when its first block-crossing step misses, max-utilization
    pauses it (the last started request), and it recomputes its prompt locally."""
    p = policy("trtllm:max-utilization", num_gpu_blocks=11)  # 10 usable
    p.add_request(colocated("X", 100, 50))
    step(p)  # X holds 7 blocks
    p.add_request(generation_only("G", 48, 8))
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == {"G": 48} and p.kv.num_free_blocks == 0
    step(p, recv={"G"})
    plan, out = step(p)  # G's first token needs a 4th block: none free, G is paused
    assert plan.num_scheduled_tokens == {"X": 1} and plan.paused_req_ids == ["G"]
    assert state(p)["G"] == "CONTEXT_INIT" and p.kv.num_free_blocks == 3
    plan, out = step(p)  # re-admitted as a context: 47 tokens reused, the token it samples was out
    assert plan.num_scheduled_tokens == {"G": 1, "X": 1} and plan.resumed_req_ids == ["G"]
    assert outs(out) == [("G", [], None), ("X", [TOKEN], None)]


def test_max_requests_has_no_cache_transceiver():
    p = policy("trtllm:max-requests")
    with pytest.raises(ValueError, match="no cache transceiver"):
        p.add_request(generation_only("G", 40, 4))
    with pytest.raises(ValueError, match="no cache transceiver"):
        p.add_request(context_only("C", 40))


def test_generation_only_needs_room_for_a_second_token():
    p = policy()
    with pytest.raises(ValueError, match="room for 2 output tokens"):
        p.add_request(generation_only("G", 40, 1))


def test_a_disagg_generation_init_request_the_pool_can_never_hold_is_a_wedge():
    from schedsim.policies.trtllm import SchedulerWedged

    p = policy(num_gpu_blocks=3)  # 2 usable blocks, the prompt needs 3
    p.add_request(generation_only("G", 40, 4))
    with pytest.raises(SchedulerWedged, match="can never schedule request G: it needs 3 blocks"):
        p.schedule()


def test_guaranteed_no_evict_reserves_nothing_for_a_request_whose_kv_arrives():
    """A receiving request is below the capacity window, so no-evict does not reserve its blocks to
    completion: G1 is admitted into them (3 of the 3 free after G0's 4), and 17 steps after both
    start generating G0's 81st token finds no block: TensorRT-LLM fails the batch."""
    from schedsim.policies.trtllm import KvCacheExhausted

    p = policy("trtllm:guaranteed-no-evict", num_gpu_blocks=8)  # 7 usable
    p.add_request(generation_only("G0", 64, 40))  # ceil(104 / 16) = 7 blocks to completion
    p.add_request(generation_only("G1", 16, 32))  # ceil(48 / 16) = 3
    plan, _ = step(p)
    assert plan.kv_reqs_to_recv == {"G0": 64} and state(p)["G1"] == INIT  # 7 reserved: none left
    plan, _ = step(p, recv={"G0", "G1"})
    assert plan.kv_reqs_to_recv == {"G1": 16} and p.kv.num_free_blocks == 2
    for _ in range(16):  # G0's tokens 65..80 and G1's 17..32 fit the 7 blocks
        plan, _ = step(p)
        assert plan.num_scheduled_tokens == {"G0": 1, "G1": 1}
    assert p.kv.num_free_blocks == 0
    with pytest.raises(KvCacheExhausted, match="sequence G0 needs a new KV block"):
        p.schedule()
