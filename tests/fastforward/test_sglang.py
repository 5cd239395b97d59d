"""sglang-overlap's fast-forward with the radix tree: stretches that evict tree leaves (decode
pages taken from cached prefixes) give byte-identical tables, on a shipped trace with shared
prefixes and on random workloads whose prompts share trace-style block hashes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, accel  # noqa: E402
from schedsim.policies.sglang import fastforward  # noqa: E402
from schedsim.traces.schema import ATTR_PREFIX_BLOCK_SIZE  # noqa: E402
from support.fastforward import assert_same
from support.workloads import SETTINGS

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


@pytest.mark.parametrize("block_size", [16, 1])
def test_stretches_that_evict_tree_leaves_are_identical(block_size, monkeypatch):
    """Mooncake's shared prefixes fill a 4,784-token pool with cached KV: some stretches make
    their decode pages by evicting leaves, and the tables still match step by step."""
    evicting = []
    replay = fastforward.SGLangFastForward._replay_kv

    def counting(self, *args, **kw):
        before = self.policy.tree_cache.evictable_units
        out = replay(self, *args, **kw)
        evicting.append(self.policy.tree_cache.evictable_units != before)
        return out

    monkeypatch.setattr(fastforward.SGLangFastForward, "_replay_kv", counting)
    cfg = RunConfig(
        policy="sglang-overlap",
        trace="mooncake-synthetic",
        max_requests=60,
        rate=8.0,
        num_gpu_blocks=300 * 16 // block_size,
        block_size=block_size,
        max_model_len=4096,
        max_num_seqs=32,
    )
    summary = assert_same(cfg)
    assert summary["fast_forward_steps"] > summary["num_steps"] // 2
    if not accel.status().active:  # compiled, the companion calls its own _replay_kv past the patch
        assert any(evicting)


@st.composite
def shared_prefix_workloads(draw: st.DrawFn) -> pd.DataFrame:
    """Requests whose prompts start with one of a few shared prefixes (Mooncake-style block
    hashes of 16 tokens), with outputs long enough to decode in stretches."""
    n = draw(st.integers(2, 8))
    groups = draw(st.integers(1, 3))
    prompts, hashes = [], []
    for i in range(n):
        g = draw(st.integers(0, groups - 1))
        shared = draw(st.integers(0, 6))
        own = draw(st.integers(1, 6))
        hashes.append(
            tuple(1000 * (g + 1) + j for j in range(shared)) + tuple(10**6 + 100 * i + j for j in range(own))
        )
        prompts.append(16 * (shared + own) - draw(st.integers(0, 15)))
    gaps = draw(st.lists(st.floats(0.0, 0.05), min_size=n, max_size=n))
    wl = pd.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_time": np.cumsum(gaps),
            "prompt_tokens": prompts,
            "output_tokens": draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)),
            "prompt_block_hashes": hashes,
        }
    )
    wl.attrs[ATTR_PREFIX_BLOCK_SIZE] = 16
    return wl


@settings(parent=SETTINGS, max_examples=15)
@given(
    wl=shared_prefix_workloads(),
    blocks=st.integers(12, 40),
    seqs=st.integers(1, 6),
    policy=st.sampled_from(["fcfs", "lpm"]),
    block_size=st.sampled_from([16, 4]),
)
def test_random_shared_prefix_workloads_identical(wl, blocks, seqs, policy, block_size):
    cfg = RunConfig(
        policy="sglang-overlap",
        engine="async",
        num_gpu_blocks=blocks * 16 // block_size,
        max_num_seqs=seqs,
        max_num_batched_tokens=64,
        max_model_len=256,
        block_size=block_size,
        latency_model="roofline",
        policy_options={"schedule_policy": policy},
    )
    assert_same(cfg, workload=wl, check_invariants=True)
