"""Folding sampled tokens into a request: stop checks, the length cap, positions streamed before a pause."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus
from schedsim.policies.trtllm.lifecycle import append_tokens
from support.trtllm import ctx

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def test_all_new_tokens_are_delivered_as_the_sampled_list_itself():
    req = ctx("A", 10, max_new=8)
    sampled = [5, 6, 7]
    delivered, finish = append_tokens(req, sampled, 100)
    assert delivered is sampled and finish is None
    assert req.request.output_token_ids == [5, 6, 7] and req.num_delivered == 3


def test_positions_streamed_before_a_pause_are_appended_but_not_delivered_again():
    req = ctx("A", 10, max_new=8)
    req.num_delivered = 2  # two tokens reached the client; a pause truncated them
    assert append_tokens(req, [5], 100) == ([], None) and req.num_delivered == 2
    assert append_tokens(req, [6, 7, 8], 100) == ([7, 8], None) and req.num_delivered == 4
    assert req.request.output_token_ids == [5, 6, 7, 8]


def test_a_stop_token_or_the_output_cap_ends_the_append_and_only_what_was_appended_is_delivered():
    req = ctx("A", 10, max_new=8)
    req.request.eos_token_id = 6
    assert append_tokens(req, [5, 6, 7], 100) == ([5, 6], RequestStatus.FINISHED_STOPPED)
    assert req.request.output_token_ids == [5, 6] and req.num_delivered == 2
    capped = ctx("B", 10, max_new=2)
    assert append_tokens(capped, [11, 12, 13], 100) == ([11, 12], RequestStatus.FINISHED_LENGTH_CAPPED)
    assert capped.request.output_token_ids == [11, 12]
