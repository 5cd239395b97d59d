"""Which engine-loop iterations fast-forward leaves to step-by-step simulation.

A stretch may start while an admitted request's (last) prefill chunk is still in flight, runs
through iterations during which an arrival lands (only the poll at the top of an iteration takes
arrivals), and may end with the update that stops requests (EOS, or max_tokens, where the async
scheduler's last schedule already leaves them out). So on a workload where nothing else happens,
the only ordinary iterations are the admissions: pinned here as exact counts, with every table
identical with fast-forward on and off.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from schedsim import RunConfig
from schedsim.policies.fastforward import FastForwardBase
from schedsim.policies.kv_cache import KVCacheManager
from schedsim.policies.kv_cache.block_pool import NULL_BLOCK_ID
from support.fastforward import assert_same, assert_same_state_when_stopped, trace_config

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _workload(rows: list[tuple[float, int, int]]) -> pd.DataFrame:
    """(arrival time, prompt tokens, output tokens) per request."""
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(len(rows))],
            "arrival_time": [a for a, _, _ in rows],
            "prompt_tokens": [p for _, p, _ in rows],
            "output_tokens": [o for _, _, o in rows],
        }
    )


# max_tokens = the traced output ('output': the request stops on EOS at max_tokens, which the
# async scheduler sees coming) or a far cap ('cap': EOS first, the request is still scheduled)
@pytest.mark.parametrize("source", ["output", "cap"])
@pytest.mark.parametrize("policy", ["vllm", "vllm-async", "orca", "sarathi", "static"])
def test_one_request_is_one_admission_and_one_jump(policy: str, source: str) -> None:
    cfg = RunConfig(policy=policy, max_tokens_source=source, max_tokens_cap=500)
    s = assert_same(cfg, workload=_workload([(0.0, 100, 40)]))
    assert (s["num_finished"], s["fast_forward_jumps"]) == (1, 1)
    assert s["num_steps"] - s["fast_forward_steps"] == 1  # the admission
    # async with EOS before max_tokens schedules one step past the EOS (its output is dropped)
    assert s["num_steps"] == (41 if (policy, source) == ("vllm-async", "cap") else 40)


@pytest.mark.parametrize("source", ["output", "cap"])
@pytest.mark.parametrize("policy", ["vllm", "vllm-async", "orca", "sarathi"])
def test_arrival_mid_stretch_and_two_finishes(policy: str, source: str) -> None:
    cfg = RunConfig(policy=policy, max_tokens_source=source, max_tokens_cap=500)
    s = assert_same(cfg, workload=_workload([(0.0, 100, 60), (0.1, 50, 80)]))
    assert s["num_finished"] == 2
    assert s["num_steps"] - s["fast_forward_steps"] == 2  # the two admissions only
    assert s["fast_forward_jumps"] == 3  # r0 alone, both until r0 stops, r1 alone


@pytest.mark.parametrize("policy", ["vllm", "vllm-async"])
def test_default_trace_slice_leaves_about_one_ordinary_iteration_per_request(policy: str) -> None:
    s = assert_same(RunConfig(policy=policy, max_requests=200))
    ordinary = s["num_steps"] - s["fast_forward_steps"]
    assert ordinary <= 1.1 * s["num_requests"], (ordinary, s["num_requests"])  # was ~3.6 a request


@pytest.mark.parametrize("starved", [False, True])
@pytest.mark.parametrize("policy,engine", [("vllm", "sync"), ("vllm-async", "async")])
def test_deferred_block_free_identical_tables_and_state(
    policy: str, engine: str, starved: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's defer_block_free: finishes inside a stretch park their blocks behind fences."""
    base = RunConfig(
        **{
            **trace_config(policy, engine, "azure-conv-2023", starved=starved).__dict__,
            "policy_options": {"defer_block_free": True},
        }
    )
    for extra in ({}, {"max_tokens_source": "cap"}, {"abort_fraction": 0.3, "abort_window_s": 3.0}):
        assert assert_same(RunConfig(**{**base.__dict__, **extra}))["fast_forward_steps"] > 0, extra
    assert_same_state_when_stopped(base, (1.37, 2.9), monkeypatch)


@pytest.mark.parametrize("both_released", [False, True])
def test_fenced_release_counts_only_blocks_losing_their_last_reference(both_released: bool) -> None:
    """The horizon's count of blocks the first update's fenced release frees is what end_step then
    frees: a block still shared through a prefix hit stays held, a null block is no block."""
    kv = KVCacheManager(num_gpu_blocks=10, block_size=4, max_model_len=64)
    a, b, c = kv.pool.get_new_blocks(3)
    kv.pool.touch([a])  # a second request's prefix hit: two references
    fence = kv.processed_step_seq + 1
    kv.deferred_frees.append((fence, [a, b]))
    if both_released:
        kv.deferred_frees.append((fence, [NULL_BLOCK_ID, a, c]))
    config = SimpleNamespace(defer_block_free=True)
    ff = FastForwardBase(SimpleNamespace(config=config, kv=kv, max_concurrent_batches=2))
    counted = ff._released_blocks()
    before = kv.num_free_blocks
    kv.end_step()
    assert counted == kv.num_free_blocks - before == (3 if both_released else 1)
