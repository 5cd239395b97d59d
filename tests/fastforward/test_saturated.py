"""Exact fast-forward under saturation: a full batch on a short pool, where an admission, a finish,
a preemption or a pause comes every few steps and stretches are short. For every registered
policy on its own engine loop, the tables are byte-identical with fast-forward on and off (the
saturated benchmark's configuration, bench/bench_saturated.py, scaled down to a test's size)."""

from __future__ import annotations

import pandas as pd
import pytest
from schedsim import RunConfig
from schedsim.traces import cap_tokens, load_workload
from support.fastforward import POLICIES, assert_same

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

MAX_TOKENS = 1024  # prompt + output, cut as the benchmark cuts the trace at 4,096


def cut_trace(n: int, max_tokens: int) -> pd.DataFrame:
    """The conversation trace's first n requests, prompt + output cut to max_tokens."""
    return cap_tokens(load_workload("azure-conv-2023").iloc[:n], max_tokens)


@pytest.mark.parametrize("policy", POLICIES)
def test_saturated_trace_identical(policy: str) -> None:
    cfg = RunConfig(
        policy=policy,
        max_num_seqs=16,
        num_gpu_blocks=600,
        max_model_len=MAX_TOKENS,
        max_num_batched_tokens=128 if policy == "sarathi" else 1024,
        rate=40.0,
    )
    summary = assert_same(cfg, workload=cut_trace(100, MAX_TOKENS))
    assert summary["num_finished"] == 100
    assert summary["num_steps"] > 0
