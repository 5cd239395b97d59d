"""StepPlan's block tables: read through the KV manager's lookup on first use, for every policy."""

from __future__ import annotations

import pytest
from schedsim.policies import Request, StepPlan, make_policy


def test_block_ids_read_through_the_lookup_once_for_the_scheduled_requests() -> None:
    tables = {"a": [1, 2], "b": [3], "idle": [4]}
    reads: list[str] = []

    def lookup(rid: str) -> list[int]:
        reads.append(rid)
        return tables[rid]

    plan = StepPlan(num_scheduled_tokens={"a": 5, "b": 1})
    plan.block_table = lookup
    assert reads == []  # nothing read until asked
    assert plan.block_ids == {"a": [1, 2], "b": [3]}
    assert plan.block_ids["a"] is tables["a"]  # the manager's own list
    plan.block_ids["b"] = [9]  # a caller may overwrite an entry (the backend's timing plans do)
    assert plan.block_ids == {"a": [1, 2], "b": [9]} and reads == ["a", "b"]


def test_given_block_ids_win_and_no_lookup_means_none() -> None:
    plan = StepPlan(num_scheduled_tokens={"a": 1}, block_ids={"a": [7]})
    plan.block_table = lambda rid: pytest.fail("the given tables must be used")
    assert plan.block_ids == {"a": [7]}
    assert StepPlan(num_scheduled_tokens={"a": 1}).block_ids == {}


@pytest.mark.parametrize(
    "name", ["vllm", "vllm-async", "orca", "sarathi", "sglang-overlap", "trtllm:max-utilization"]
)
def test_every_policy_hands_the_tables_it_holds_at_schedule_time(name: str) -> None:
    policy = make_policy(name, num_gpu_blocks=64, block_size=4, max_model_len=64)
    for i, n in enumerate((9, 5, 14)):
        policy.add_request(Request(f"r{i}", 0.0, n, 4))
    plan = policy.schedule()
    assert plan.num_scheduled_tokens, name
    for rid, ids in plan.block_ids.items():
        assert rid in plan.num_scheduled_tokens
        assert ids == policy.kv.get_block_ids(rid)  # type: ignore[attr-defined]
        assert len(ids) * 4 >= plan.context_lens[rid] + plan.num_scheduled_tokens[rid]
    assert set(plan.block_ids) == set(plan.num_scheduled_tokens)
