"""max_tokens of trace rows without one: the output length (as vllm bench serve) or a cap."""

from __future__ import annotations

import pytest
from schedsim import RunConfig
from schedsim.run.workload import prepare
from schedsim.traces import load_workload


@pytest.fixture(scope="module")
def rows():
    return load_workload("azure-conv-2023").head(40)


def test_output_source_sets_max_tokens_to_the_trace_length(rows):
    prep = prepare(rows, RunConfig(max_tokens_source="output"), max_model_len=8192)
    got = [r.max_tokens for r in prep.requests]
    pairs = zip(rows["output_tokens"], rows["prompt_tokens"], strict=True)
    assert got == [min(o, 8192 - p) for o, p in pairs]


def test_cap_source_uses_the_cap_or_the_room_left(rows):
    capped = prepare(rows, RunConfig(max_tokens_source="cap", max_tokens_cap=64), max_model_len=8192)
    assert {r.max_tokens for r in capped.requests} == {64}
    room = prepare(rows, RunConfig(max_tokens_source="cap"), max_model_len=8192)
    assert [r.max_tokens for r in room.requests] == [8192 - p for p in rows["prompt_tokens"]]


def test_unknown_source_is_rejected_by_name():
    with pytest.raises(ValueError, match="max_tokens_source"):
        RunConfig(max_tokens_source="eos")
