"""KV-starved comparison: max-utilization runs more requests at once and pauses; no-evict queues."""

from __future__ import annotations

import pytest
from schedsim.policies import make_policy
from support.trtllm_driver import make_request, run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _run(capacity: str):
    policy = make_policy(
        f"trtllm:{capacity}",
        num_gpu_blocks=25,
        block_size=16,
        max_model_len=256,
        max_num_batched_tokens=256,
        max_num_seqs=16,
    )
    # Each request reserves ceil((32 + 96) / 16) = 8 blocks to completion but emits EOS after 48.
    arrivals = [(0, make_request(f"{capacity}/{i}", 32, 48, max_tokens=96)) for i in range(8)]
    log = run(policy, arrivals)
    ttft = [log.first_token_step[r.request_id] for _, r in arrivals]
    return policy, log, sum(ttft) / len(ttft)


def test_max_utilization_admits_more_and_pauses_while_no_evict_queues():
    util, util_log, util_ttft = _run("max-utilization")
    safe, safe_log, safe_ttft = _run("guaranteed-no-evict")
    assert len(util_log.finished) == len(safe_log.finished) == 8
    assert safe_log.max_running == 3  # 24 usable blocks / 8 reserved per request
    assert util_log.max_running > safe_log.max_running
    assert util.stats.num_pauses > 0 and util.stats.num_recomputed_tokens > 0
    assert safe.stats.num_pauses == 0 and safe.stats.num_recomputed_tokens == 0
    assert safe_ttft > util_ttft  # requests wait in the queue instead of being paused
