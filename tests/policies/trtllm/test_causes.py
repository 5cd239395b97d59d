"""One scenario per rule of TensorRT-LLM's schedulers and KV cache manager, with the step that shows it.

Each base scenario in conformance/scenarios is replayed (TensorRT-LLM's golden log of it is checked
in full by tests/conformance/test_trtllm.py); these tests name the lines that pin each rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedsim.conformance.trtllm import run_scenario
from schedsim.policies.trtllm import KvCacheExhausted, SchedulerWedged, TokenBudgetExceeded

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


SCENARIOS = Path(__file__).resolve().parents[2] / "conformance" / "trtllm" / "scenarios"


def scenario(name: str) -> dict:
    """A base scenario by name."""
    return json.loads((SCENARIOS / f"{name}.json").read_text())


def replay(name: str, **options) -> list[dict]:
    """Its step log (policy options on top of its config)."""
    return run_scenario(scenario(name), options=options)


def ctx(log: list[dict], step: int) -> list[list]:
    """The contexts (id, start after reuse, chunk) one step ran."""
    return log[step]["ctx"]


def first_step(log: list[dict], rid: str) -> int:
    """The first step that runs a request."""
    return next(line["step"] for line in log if rid in line["gen"] or any(c[0] == rid for c in line["ctx"]))


# ---- 1: the first pass of guaranteed-no-evict / static batch takes only generations ----
def test_started_context_behind_a_new_one_wedges_guaranteed_no_evict():
    log: list[dict] = []
    with pytest.raises(SchedulerWedged) as info:
        run_scenario(scenario("c1_wedge_started_context_behind_new_one"), log)
    assert ctx(log, 0) == [["l", 0, 4], ["s", 0, 4]]  # y prefix-skipped; l starts its prompt
    assert all(not line["ctx"] for line in log[1:])  # l never runs again: y breaks the second pass
    assert info.value.step == 5 and info.value.request_ids == ["y", "l"]
    assert "request y needs 10 blocks to completion" in str(info.value)


def test_started_contexts_in_first_pass_is_the_opt_in_way_out():
    log = replay("c1_wedge_started_context_behind_new_one", started_contexts_in_first_pass=True)
    assert ctx(log, 1) == [["l", 4, 4]]
    assert {rid for line in log for rid in line["finished"]} == {"s", "y", "l"}


def test_started_context_stalls_until_the_head_fits():
    log = replay("c1_stall_started_context_behind_new_one")
    assert ctx(log, 1) == [["y", 4, 4]] and log[4]["finished"] == ["s"]
    assert [ctx(log, s) for s in (2, 3, 4)] == [[], [], []]  # l, started, waits behind y
    assert ctx(log, 5) == [["l", 4, 4]]


def test_static_batch_started_context_waits_for_the_generations():
    log = replay("c1_static_started_context_waits_for_generations")
    assert ctx(log, 0) == [["l", 0, 4], ["g", 0, 4]]
    assert all(not ctx(log, s) for s in range(1, 6)) and log[5]["finished"] == ["g"]
    assert ctx(log, 6) == [["l", 4, 8]]


# ---- 2: a context's blocks are stored once its whole prompt is computed ----
def test_duplicate_waits_until_the_prompt_is_complete_then_reuses():
    log = replay("c2_duplicate_skipped_until_prompt_complete")
    assert first_step(log, "d") == 3 and ctx(log, 2) == [["p", 24, 12]]
    assert ctx(log, 3) == [["d", 8, 4]]


def test_unfinished_prompt_is_not_reused():
    log = replay("c2_unfinished_prompt_not_reused")
    assert ctx(log, 1) == [["p", 12, 8], ["d", 0, 4]]


# ---- 3: the executor queue holds arrivals beyond max_batch_size ----
def test_later_arrival_waits_unseen_in_the_executor_queue():
    log = replay("c3_executor_queue_holds_later_arrivals")
    assert ctx(log, 1) == [["a", 8, 4]]  # r would fit, but only q (skipped) is active
    assert first_step(log, "r") == 3


# ---- 4: release stores the partial last block; re-admission reuses an exact match ----
def test_readmission_after_a_pause_recomputes_one_token():
    log = replay("c4_readmission_recomputes_one_token")
    assert log[7]["paused"] == ["b"] and ctx(log, 8) == [["b", 15, 1]]


def test_truncating_pause_reuses_the_kept_prefix():
    log = replay("c4_pause_truncates_and_reuses_the_kept_prefix")
    assert log[12]["paused"] == ["b"] and ctx(log, 13) == [["b", 13, 1]]  # 14 = max_input_len


# ---- 5: one block per key; eviction takes the subtree ----
def test_duplicate_blocks_are_not_retained():
    log = replay("c5_duplicate_blocks_not_retained")
    assert ctx(log, 5) == [["d", 0, 10]]


def test_evicted_block_takes_the_blocks_stored_below_it():
    log = replay("c5_evicted_parent_takes_its_children")
    assert ctx(log, 5) == [["s", 0, 8]] and ctx(log, 7) == [["r", 8, 8]]


# ---- 6: a fully cached block-aligned prompt is credited every full block ----
def test_cached_aligned_prompt_costs_one_token():
    log = replay("c6_cached_aligned_prompt_costs_one_token")
    assert ctx(log, 3) == [["b", 7, 1], ["c", 0, 8]]  # 9 tokens: b charged 1, computes 1


def test_over_admission_fails_where_tensorrt_llm_fails():
    with pytest.raises(KvCacheExhausted) as info:
        replay("c6_over_admission_fails_in_add_sequence")
    assert info.value.step == 5 and "b" in info.value.request_ids and "No free blocks" in str(info.value)


def test_untrimmable_token_budget_fails_where_tensorrt_llm_fails():
    with pytest.raises(TokenBudgetExceeded) as info:
        replay("c6_token_budget_cannot_be_trimmed")
    assert info.value.step == 4 and info.value.request_ids == ["c", "b"]
    assert "needs 5 tokens > max_num_tokens 4" in str(info.value)


def test_fit_token_budget_shrinks_the_last_chunk_to_a_block_boundary():
    log = replay("x12_fit_token_budget_shrinks_a_last_chunk")
    assert ctx(log, 4) == [["c", 0, 4], ["b", 7, 1]]  # c was given 8 of the 8 tokens


# ---- 7: a contributed block is registered only once its request is admitted ----
def test_retry_after_a_pause_does_not_skip_itself():
    log = replay("c7_retry_after_pause_does_not_skip_itself")
    assert log[1]["paused"] == ["g"] and ctx(log, 1) == [["x", 4, 24]]


# ---- 8: max-requests has no KV cache manager ----
def test_max_requests_never_reuses():
    assert ctx(replay("c8_max_requests_never_reuses"), 2) == [["b", 0, 16]]


def test_max_requests_never_pauses():
    log = replay("c8_max_requests_never_pauses")
    assert not any(line["paused"] for line in log)
    assert sorted(rid for line in log for rid in line["finished"]) == ["r0", "r1", "r2", "r3"]


# ---- partial reuse, force-chunk, batch order ----
def test_partial_block_is_copied_and_reused():
    assert ctx(replay("x9_partial_block_copied"), 2) == [["b", 7, 5]]


def test_force_chunk_takes_the_remainder_without_snapshot_points():
    log = replay("x10_force_chunk_takes_the_remainder")
    assert ctx(log, 0) == [["a", 0, 20]] and ctx(log, 1) == [["b", 0, 4], ["a", 20, 14]]


def test_contexts_are_rebinned_after_reuse():
    assert ctx(replay("x11_contexts_rebinned_after_reuse"), 3) == [["b", 0, 4], ["a", 11, 1]]
