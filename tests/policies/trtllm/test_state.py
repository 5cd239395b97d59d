"""The request state machine: chronological order, scheduler windows, chunk cursor helpers."""

from __future__ import annotations

import pytest
from schedsim.policies.trtllm import CAPACITY_WINDOW, MICRO_BATCH_WINDOW, LlmRequestState
from support.trtllm import ctx

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

S = LlmRequestState


def test_reaching_a_state_is_one_comparison_in_chronological_order():
    req = ctx("A", 10)
    assert req.has_reached_state(S.ENCODER_INIT) and req.has_reached_state(S.CONTEXT_INIT)
    assert not req.has_reached_state(S.GENERATION_IN_PROGRESS)
    req.state = S.GENERATION_COMPLETE
    assert req.has_reached_state(S.GENERATION_TO_COMPLETE) and req.is_finished


@pytest.mark.parametrize(
    "state,capacity,micro",
    [
        (S.DISAGG_GENERATION_INIT, False, False),
        (S.CONTEXT_INIT, True, True),
        (S.GENERATION_IN_PROGRESS, True, True),
        (S.GENERATION_TO_COMPLETE, True, False),  # still holds blocks, never re-enters a batch
        (S.GENERATION_COMPLETE, False, False),
    ],
)
def test_scheduler_windows(state, capacity, micro):
    assert CAPACITY_WINDOW.admits(state) is capacity
    assert MICRO_BATCH_WINDOW.admits(state) is micro


def test_prepopulated_prefix_shifts_a_non_last_chunk_and_floors_its_end_to_a_block():
    req = ctx("A", 100)
    req.context_chunk_size = 40
    req.set_prepopulated_prompt_len(32, 16)
    assert (req.context_current_position, req.context_chunk_size) == (32, 32)  # end 72 -> 64
    assert req.is_first_context_chunk and not req.is_last_context_chunk


def test_prepopulated_prefix_clamps_a_last_chunk_to_what_remains():
    req = ctx("A", 100)
    req.set_prepopulated_prompt_len(32, 16)
    assert (req.context_chunk_size, req.is_last_context_chunk) == (68, True)
    with pytest.raises(ValueError, match="prepopulated"):
        ctx("B", 64).set_prepopulated_prompt_len(64, 16)  # at least one token is always computed


def test_chunk_cursor_moves_and_first_chunk_follows_the_prepopulated_length():
    req = ctx("A", 100)
    req.set_context_chunk_size(500)
    assert req.context_chunk_size == 100  # clamped to what remains
    req.set_context_chunk_size(48)
    req.move_to_next_context_chunk()
    assert (req.context_current_position, req.context_remaining_length) == (48, 52)
    assert not req.is_first_context_chunk
