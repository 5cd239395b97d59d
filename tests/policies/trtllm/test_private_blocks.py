"""A finished request whose blocks only its own keys reach (no token ids, no trace hashes) has its
subtree pruned from the radix tree instead of stored: nobody could reuse it, so no decision changes.

The check: the same workload run twice, once as is and once with every such request given trace
hashes of its own (unique, so still shared with nobody, but stored at its end as usual), schedules
identically, block for block, pauses and re-admissions included.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from schedsim.policies import make_policy
from schedsim.policies.trtllm import TrtllmFailure
from schedsim.policies.trtllm.block_keys import BlockKeys
from schedsim.policies.trtllm.kv_cache_manager import KVCacheManager
from support.trtllm_driver import BLOCK, make_request, run, workloads

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _own_hashes(i: int, prompt: int) -> tuple[int, ...]:
    """Trace hashes no other request of the workload has (the workloads' shared ones are < 10)."""
    return tuple(1000 * (i + 1) + b for b in range(prompt // BLOCK))


def _trace(capacity: str, reqs: list, knobs: dict, hashed: bool) -> tuple:
    """Every step's decisions and block tables, and the free queue at the end (or the stop)."""
    policy = make_policy(f"trtllm:{capacity}", block_size=BLOCK, max_model_len=256, **knobs)
    arrivals = []
    for step, i, p, o, h, extra in reqs:
        if hashed and not h:
            h = _own_hashes(i, p)
        arrivals.append((step, make_request(f"r{i}", p, o, hashes=h, **extra)))
    try:
        log = run(policy, arrivals, max_steps=4000)
    except TrtllmFailure as stop:
        return ("stopped", stop.cause, stop.request_ids)
    steps = [
        (
            dict(plan.num_scheduled_tokens),
            {rid: list(ids) for rid, ids in plan.block_ids.items()},
            list(plan.paused_req_ids),
            list(plan.kv_block_copies),
        )
        for plan in log.plans
    ]
    return steps, dict(log.finished), policy.kv.free_queue.block_ids(), policy.stats.num_reused_tokens


@pytest.mark.parametrize("capacity", ["max-utilization", "guaranteed-no-evict"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=workloads())
def test_pruning_own_blocks_changes_no_decision(capacity, data):
    reqs, knobs = data
    assert _trace(capacity, reqs, knobs, hashed=False) == _trace(capacity, reqs, knobs, hashed=True)


def test_a_finished_request_prunes_only_its_own_subtree():
    keys = BlockKeys(4)
    kv = KVCacheManager(num_blocks=12, tokens_per_block=4, max_seq_len=64)
    own = make_request("own", 9, 4)
    hashed = make_request("hashed", 9, 4, hashes=(5, 6))
    short = make_request("short", 4, 4)
    for req in (own, hashed):
        kv.add_sequence(req.request_id, 9, keys.keys(req, 8))
        kv.store_blocks(req.request_id, keys.full_keys(req, 8))
    assert kv.tree.num_stored_blocks() == 4
    assert keys.private_root(hashed) is None and keys.private_root(short) is None  # block 0 may be partial
    root = keys.private_root(own)
    assert root == keys.full_keys(own, 8)[0]
    own_blocks = list(kv.sequences["own"].blocks)
    kv.remove_private_sequence("own", root)
    assert kv.tree.num_stored_blocks() == 2  # the hashed request's two blocks stay
    assert all(b.node is None and b.ref_count == 0 for b in own_blocks)
    assert kv.free_queue.block_ids()[-3:] == [b.block_id for b in reversed(own_blocks)]  # last first
    kv.check_invariants()
    hashed_blocks = list(kv.sequences["hashed"].blocks)
    kv.remove_sequence("hashed", keys.keys(hashed, 9))
    assert kv.tree.num_stored_blocks() == 3  # stored at its end, the partial tail too: reusable
    assert all(b.node is not None and b.ref_count == 0 for b in hashed_blocks)
    kv.check_invariants()


def test_paused_requests_find_their_own_blocks_either_way():
    """KV-starved max-utilization: paused requests come back to blocks they stored at the pause
    (their own keys, still in the tree then), whether or not their keys are private."""
    reqs = [(0, i, 100, 30, None, {"max_tokens": 60}) for i in range(8)]
    knobs = dict(num_gpu_blocks=17, max_num_batched_tokens=256, max_num_seqs=16)
    private = _trace("max-utilization", reqs, knobs, hashed=False)
    assert private == _trace("max-utilization", reqs, knobs, hashed=True)
    assert any(step[2] for step in private[0])  # some paused
    assert private[3] > 0  # and reused their own stored blocks on coming back
