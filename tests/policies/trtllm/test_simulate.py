"""The trtllm policies under schedsim.run.simulate: sync engine and two pipeline micro-batches in flight."""

from __future__ import annotations

import pytest
from schedsim import simulate
from schedsim.run.config import RunConfig

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


@pytest.mark.parametrize("micro_batches", [1, 2])
@pytest.mark.parametrize(
    "capacity", ["max-requests", "guaranteed-no-evict", "static-batch", "max-utilization"]
)
def test_simulated_replay_finishes_every_request(capacity, micro_batches):
    cfg = RunConfig(
        policy=f"trtllm:{capacity}",
        trace="azure-conv-2023",
        max_requests=12,
        num_gpu_blocks=400,
        max_model_len=4096,
        max_tokens_source="cap",
        max_tokens_cap=128,
        max_num_batched_tokens=512,
        latency_model="roofline",
        policy_options={"num_micro_batches": micro_batches},
    )
    res = simulate(cfg, check_invariants=True)
    assert res.summary["num_finished"] == 12
    assert (res.requests["finish_reason"].isin(["stop", "length"])).all()
    if capacity in ("guaranteed-no-evict", "static-batch"):
        assert res.summary["num_pauses"] == 0
