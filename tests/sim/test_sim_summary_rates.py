"""Summary rates: recompute share, pauses per 1k steps, prefix-cache hit rate, prefix skips."""

from __future__ import annotations

from schedsim import RunConfig, simulate
from schedsim.results import SUMMARY_KEYS


def test_rates_follow_the_tables_under_kv_pressure():
    res = simulate(RunConfig(policy="trtllm:max-utilization", trace="azure-conv-2023",
                             max_requests=120, rate=20.0, num_gpu_blocks=300, max_model_len=4096))
    s, steps = res.summary, res.steps
    assert set(SUMMARY_KEYS) <= set(s)
    assert s["num_pauses"] > 0
    computed = (steps["num_prefill_tokens"] + steps["num_decode_tokens"]).sum()
    assert s["recomputed_share"] == s["recomputed_tokens"] / computed > 0
    assert s["pauses_per_1k_steps"] == 1000 * s["num_pauses"] / s["num_steps"]
    assert s["num_prefix_skips"] == 0  # skipping is off by default


def test_prefix_cache_hit_rate_counts_shared_prompts():
    res = simulate(RunConfig(policy="vllm", trace="mooncake-synthetic", max_requests=200))
    req = res.requests
    want = req["num_cached_tokens"].sum() / req["prompt_tokens"].sum()
    assert 0 < res.summary["prefix_cache_hit_rate"] == want
    off = simulate(RunConfig(policy="vllm", trace="mooncake-synthetic", max_requests=200,
                             enable_prefix_caching=False))
    assert off.summary["prefix_cache_hit_rate"] == 0
