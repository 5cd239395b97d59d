"""Lazy private publication (KVCacheManager(lazy_private=True), the vLLM policies) is exact.

Blocks only their own request can know are published outside the hash map and mapped when a
request that is not finished frees them. Every lookup must answer as eager publication would:
the tables and every preemption of KV-starved runs are identical with the vLLM policies' manager
swapped for an eager one, and prefix hits after a preemption still happen.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from schedsim.policies import Request
from schedsim.policies.kv_cache import KVCacheManager
from schedsim.policies.kv_cache.block_pool import PRIVATE_HASH
from schedsim.policies.kv_cache.hashing import NEVER_PRIVATE, private_from

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

TABLES = ("requests", "steps", "timeline")
sim_module = sys.modules["schedsim.run.simulate"]  # the module (the package exports the function)


def _run(
    cfg: RunConfig, lazy: bool, monkeypatch: pytest.MonkeyPatch, workload: pd.DataFrame | None = None
) -> object:
    """simulate with the policy's manager rebuilt eager (lazy=False) before the first request."""
    real_make = sim_module.make_policy

    def make(*args: object, **kw: object) -> object:
        policy = real_make(*args, **kw)
        kv = policy.kv
        policy.kv = KVCacheManager(
            kv.pool.num_gpu_blocks,
            kv.block_size,
            kv.max_model_len,
            kv.enable_caching,
            kv.watermark_blocks / kv.pool.num_gpu_blocks,
            lazy_private=lazy,
        )
        assert kv.lazy_private  # the vLLM policies' own choice
        return policy

    monkeypatch.setattr(sim_module, "make_policy", make)
    res = simulate(cfg, workload=workload, check_invariants=True)
    monkeypatch.setattr(sim_module, "make_policy", real_make)
    return res


def _assert_same(
    cfg: RunConfig, monkeypatch: pytest.MonkeyPatch, workload: pd.DataFrame | None = None
) -> dict:
    eager, lazy = (_run(cfg, flag, monkeypatch, workload) for flag in (False, True))
    for name in TABLES:
        assert getattr(eager, name).equals(getattr(lazy, name)), name
    return lazy.summary


@pytest.mark.parametrize("policy", ["vllm", "vllm-async"])
@pytest.mark.parametrize("trace", ["azure-conv-2023", "mooncake-synthetic"])
def test_kv_starved_runs_identical_to_eager_publication(
    policy: str, trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Length-only prompts (all private) and trace-given block hashes (a shared prefix, then a
    private tail), on pools small enough that requests are preempted and re-admitted."""
    cfg = RunConfig(
        policy=policy,
        trace=trace,
        max_requests=80,
        rate=8.0,
        num_gpu_blocks=300,
        max_model_len=4096,
        max_num_seqs=32,
    )
    summary = _assert_same(cfg, monkeypatch)
    assert summary["num_preemptions"] > 0


@pytest.mark.parametrize("policy", ["vllm", "vllm-async"])
@settings(
    max_examples=8,
    deadline=None,  # _run puts make_policy back itself
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(n=st.integers(2, 10), blocks=st.integers(18, 50), seed=st.integers(0, 5), defer=st.booleans())
def test_random_preemption_workloads_identical(
    policy: str, n: int, blocks: int, seed: int, defer: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bursts of short requests through a tiny pool, with and without deferred block frees."""
    wl = pd.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_time": [0.001 * i for i in range(n)],
            "prompt_tokens": [20 + (37 * i + seed) % 120 for i in range(n)],
            "output_tokens": [5 + (11 * i + seed) % 60 for i in range(n)],
        }
    )
    cfg = RunConfig(
        policy=policy,
        num_gpu_blocks=blocks,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=256,
        block_size=16,
        seed=seed,
        latency_model="roofline",
        policy_options={"defer_block_free": defer} if defer else {},
    )
    _assert_same(cfg, monkeypatch, workload=wl)


def test_a_preempted_request_hits_its_own_private_blocks() -> None:
    """Published without a hash; a preemption maps them; the re-admitted request hits them."""
    kv = KVCacheManager(20, 4, 64, lazy_private=True)
    r = Request("a", 0.0, 10, 4)  # prompt known only by its length: private from block 0
    assert private_from(r, 4) == 0
    assert kv.allocate_slots(r, 10) is not None
    r.num_computed_tokens = 10
    kv.cache_blocks(r, 10)
    table = list(kv.get_block_ids("a"))
    assert [kv.pool.block_hash[b] for b in table[:2]] == [PRIVATE_HASH] * 2 and not kv.pool.cached
    r.status = r.status.RUNNING
    kv.free(r)  # a preemption: the request is not finished
    assert len(kv.pool.cached) == 2
    r.status, r.num_computed_tokens = r.status.PREEMPTED, 0
    hit, n = kv.get_computed_blocks(r)
    assert hit == table[:2] and n == 8
    kv.check_invariants()


def test_a_finished_request_leaves_nothing_in_the_hash_map() -> None:
    """Its private blocks go to the back of the free queue (cached) but never into the map."""
    kv = KVCacheManager(20, 4, 64, lazy_private=True)
    r = Request("a", 0.0, 10, 4)
    kv.allocate_slots(r, 10)
    r.num_computed_tokens = 10
    kv.cache_blocks(r, 10)
    table = list(kv.get_block_ids("a"))
    r.status = r.status.FINISHED_STOPPED
    kv.free(r)
    assert not kv.pool.cached
    order = kv.pool.free_queue
    assert order[0] == table[2] and order[-2:] == [table[1], table[0]]  # unhashed tail first
    got = kv.pool.get_new_blocks(kv.pool.num_free)  # evicting unmapped blocks
    assert len(got) == 19 and not kv.pool.cached and kv.pool.block_hash[table[0]] is None
    kv.pool.free_blocks(got)
    kv.check_invariants()


@pytest.mark.parametrize(
    "tokens, hashes, prompt_len, want",
    [
        (list(range(10)), None, 10, NEVER_PRIVATE),  # token ids: everything can be shared
        (None, None, 10, 0),  # length only
        (None, (1, 2), 10, 2),  # given hashes, then a partial block known only to the request
        (None, (1, 2), 8, NEVER_PRIVATE),  # given hashes cover the prompt: outputs chain on them
        (None, (1,), 8, 1),  # one given block, then an unknown one
    ],
)
def test_private_from(
    tokens: list[int] | None, hashes: tuple[int, ...] | None, prompt_len: int, want: int
) -> None:
    r = Request("a", 0.0, prompt_len, 4, prompt_token_ids=tokens, prompt_block_hashes=hashes)
    assert private_from(r, 4) == want
