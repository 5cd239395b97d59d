"""LlmRequest::pause: fold generated tokens into the prompt, truncate at max_input_len, recompute."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus
from schedsim.policies.trtllm import LlmRequestState, pause
from support.trtllm import ctx, gen

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def test_pause_folds_generated_tokens_and_truncates_at_max_input_len():
    req = gen("A", prompt=80, generated=30, max_new=50)
    lost = pause(req, max_input_len=100)
    assert (req.prompt_len, req.max_new_tokens, lost) == (100, 30, 10)
    assert req.request.num_tokens == 100 and len(req.request.output_token_ids) == 20
    assert req.request.num_truncated_tokens == 10 and req.request.num_pauses == 1
    assert req.state is LlmRequestState.CONTEXT_INIT and req.request.status is RequestStatus.PREEMPTED
    assert (req.context_current_position, req.context_chunk_size, req.prepopulated_prompt_len) == (0, 100, 0)
    assert req.request.num_computed_tokens == 0 and req.estimated_reusable_tokens == 0
    assert req.recompute_watermark == 100  # 109 tokens had KV; 100 of them survive the fold


def test_pause_without_truncation_keeps_every_generated_token():
    req = gen("A", prompt=80, generated=30, max_new=50)
    assert pause(req, max_input_len=1000) == 0
    assert (req.prompt_len, req.max_new_tokens) == (110, 20)


def test_beam_search_rolls_back_to_the_original_prompt():
    req = gen("A", prompt=80, generated=30, max_new=50, beam=2)
    assert pause(req, max_input_len=100) == 30
    assert (req.prompt_len, req.max_new_tokens) == (80, 50)
    assert req.request.output_token_ids == []


def test_pausing_a_mid_chunk_context_loses_nothing_but_its_cursor():
    req = ctx("C", 300, pos=128)
    req.estimated_reusable_tokens = 64
    assert pause(req, max_input_len=4000) == 0
    assert (req.prompt_len, req.context_current_position, req.recompute_watermark) == (300, 0, 128)
    assert req.is_first_context_chunk and req.estimated_reusable_tokens == 0


def test_pause_rejects_a_nonpositive_cap():
    with pytest.raises(ValueError, match="max_input_len"):
        pause(gen("A"), 0)
