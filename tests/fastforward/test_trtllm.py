"""Exact fast-forward of the TensorRT-LLM policies where their own limits bind inside a decode run.

A burst of long generations on a pool too small for all of them: max-utilization pauses the last
started request when the next-step reservation (one or two steps of look-ahead) misses, and the
jumps must stop before each of those steps; max-requests (no KV cache manager) never pauses, its
block tables grow past the pool. Also LoRA adapters (the micro-batch's sort order), binding batch
caps and micro-batches.
"""

from __future__ import annotations

import pandas as pd
import pytest
from schedsim import RunConfig
from support.fastforward import assert_same, assert_same_state_when_stopped

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

# q1 and q2 cross block boundaries in the same steps; their adapters make the micro-batch swap them
BURST = pd.DataFrame(
    {
        "request_id": [f"q{i}" for i in range(4)],
        "arrival_time": [0.0, 0.001, 0.002, 0.003],
        "prompt_tokens": [100, 37, 53, 90],
        "output_tokens": [200, 180, 150, 220],
        "lora_id": [None, 3, 1, 3],
    }
)


def burst_config(policy: str, blocks: int, **options) -> RunConfig:
    """The burst on a small pool (each request needs 12-20 blocks by its end)."""
    return RunConfig(
        policy=policy,
        engine="sync",
        num_gpu_blocks=blocks,
        max_num_seqs=8,
        max_model_len=512,
        block_size=16,
        latency_model="roofline",
        policy_options=options,
    )


@pytest.mark.parametrize("two_step", [False, True])
@pytest.mark.parametrize("blocks", [30, 40, 55])
def test_pool_running_short_identical(blocks: int, two_step: bool) -> None:
    cfg = burst_config("trtllm:max-utilization", blocks, two_step_lookahead=two_step)
    summary = assert_same(cfg, workload=BURST, check_invariants=True)
    assert summary["fast_forward_steps"] > summary["num_steps"] // 6  # pauses leave contexts to redo
    assert summary["num_pauses"] > 0


@pytest.mark.parametrize("blocks", [30, 40])
def test_max_requests_grows_past_the_pool_identical(blocks: int) -> None:
    summary = assert_same(burst_config("trtllm:max-requests", blocks), workload=BURST, check_invariants=True)
    assert summary["fast_forward_steps"] > summary["num_steps"] // 2
    assert summary["num_pauses"] == 0 and summary["max_kv_usage"] == 1.0  # no KV manager: never short


@pytest.mark.parametrize(
    "options",
    [
        dict(max_batch_size=2),
        dict(max_num_tokens=64, chunk_unit_size=16),
        dict(max_peft_pages=1),
        dict(num_micro_batches=2),
        dict(chunking_policy="force-chunk"),
    ],
)
@pytest.mark.parametrize("policy", ["trtllm:guaranteed-no-evict", "trtllm:max-utilization"])
def test_options_identical(policy: str, options: dict) -> None:
    summary = assert_same(burst_config(policy, 55, **options), workload=BURST, check_invariants=True)
    if "max_peft_pages" in options or "num_micro_batches" in options:
        assert summary["fast_forward_steps"] == 0  # not modelled: they never jump
    else:
        assert summary["fast_forward_steps"] > 0


@pytest.mark.parametrize("two_step", [False, True])
@pytest.mark.parametrize("policy", ["trtllm:max-requests", "trtllm:max-utilization"])
def test_pool_running_short_policy_state(
    policy: str, two_step: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Block ids, free-queue order and every LlmRequest field, at stops inside and after jumps."""
    base = burst_config(policy, 40, two_step_lookahead=two_step)
    assert_same_state_when_stopped(base, (0.3, 0.77, 1.21, 1.9), monkeypatch, workload=BURST)


@pytest.mark.parametrize(
    "policy", ["trtllm:guaranteed-no-evict", "trtllm:max-utilization", "trtllm:max-requests"]
)
def test_output_caps_in_a_stretch_last_update_identical(policy: str) -> None:
    """max_tokens below the output length: the cap, not an EOS, stops q0 and q2 in the last update
    of a stretch, which finishes them there (batch order for the outputs, active order for the
    frees); q3's cap is what max_model_len leaves it."""
    wl = BURST.assign(max_tokens=[60, 180, 97, 1000], lora_id=None)
    cfg = burst_config(policy, 80)
    summary = assert_same(cfg, workload=wl, check_invariants=True)
    assert summary["fast_forward_steps"] > summary["num_steps"] // 2


@pytest.mark.parametrize("max_tokens", [40, 1000])  # the cap stops it, or its EOS
@pytest.mark.parametrize("policy", ["trtllm:guaranteed-no-evict", "trtllm:max-utilization"])
def test_a_lone_request_is_one_context_step_and_one_jump(policy: str, max_tokens: int) -> None:
    """Every step after the context step is jumped, the finishing one included."""
    wl = BURST.iloc[:1].assign(max_tokens=[max_tokens])
    summary = assert_same(burst_config(policy, 80), workload=wl)
    assert summary["fast_forward_steps"] == summary["num_steps"] - 1
    assert summary["fast_forward_jumps"] == 1
