"""guaranteed-no-evict's wedge (TensorRT-LLM's first pass takes only generations): detected and named;
`started_contexts_in_first_pass` schedules started contexts with the generations instead."""

from __future__ import annotations

import pytest
from schedsim.policies import make_policy
from schedsim.policies.trtllm import SchedulerWedged
from support.trtllm_driver import BLOCK, make_request, run_pipelined

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


# r0 (adapter 2) is skipped while adapter 1 holds the only PEFT page, r2 starts its context behind
# it; once the page frees, r0 misses on blocks (head-of-line break) and r2, mid-context, waits
# behind it in the second pass for ever.
ARRIVALS = [
    (1, 0, 100, 3, 2),
    (5, 1, 56, 6, None),
    (2, 2, 113, 12, None),
    (0, 3, 93, 3, None),
    (0, 4, 60, 6, 1),
    (6, 5, 93, 1, None),
]


def _policy(**options):
    return make_policy(
        "trtllm:guaranteed-no-evict",
        block_size=BLOCK,
        max_model_len=256,
        num_gpu_blocks=14,
        max_num_batched_tokens=32,
        chunk_unit_size=16,
        max_num_seqs=4,
        max_peft_pages=1,
        num_micro_batches=2,
        **options,
    )


def _arrivals(tag: str):
    return [(step, make_request(f"{tag}{i}", p, o, lora_id=lora)) for step, i, p, o, lora in ARRIVALS]


def test_started_context_behind_a_head_of_line_miss_wedges_and_is_named():
    policy = _policy()
    with pytest.raises(SchedulerWedged) as info:
        run_pipelined(policy, _arrivals("w"), depth=2, max_steps=400)
    wedge = info.value
    assert wedge.cause == "wedge" and wedge.request_ids == ["w0", "w2"]
    assert "request w0 needs 7 blocks to completion" in str(wedge) and "w2 (at 32/113)" in str(wedge)
    assert "started_contexts_in_first_pass" in str(wedge)
    with pytest.raises(SchedulerWedged):  # a fixed point: the next round chooses nothing again
        policy.schedule()


def test_started_contexts_in_first_pass_runs_the_started_context_on():
    policy = _policy(started_contexts_in_first_pass=True)
    log = run_pipelined(policy, _arrivals("r"), depth=2, max_steps=400)
    assert sorted(log.finished) == [f"r{i}" for i in range(6)]
    first = {rid: min(p.step_id for p in log.plans if rid in p.num_scheduled_tokens) for rid in ("r0", "r2")}
    assert first["r2"] < first["r0"], "r2 jumped r0 while r0's adapter did not fit"
    assert policy.kv.num_free_blocks == 13
