"""Random workloads (hypothesis) and small run configurations, shared by the property tests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schedsim import RunConfig
from schedsim.policies import get_policy_info

SETTINGS = settings(
    max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def workloads(draw: st.DrawFn) -> pd.DataFrame:
    """A few requests with short prompts and outputs, some structured, arriving in a burst."""
    n = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.floats(0.0, 0.02), min_size=n, max_size=n))
    return pd.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_time": np.cumsum(gaps),
            "prompt_tokens": draw(st.lists(st.integers(1, 200), min_size=n, max_size=n)),
            "output_tokens": draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)),
            "structured_output": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        }
    )


def small_config(policy: str, engine: str, blocks: int, seqs: int, seed: int, **kw) -> RunConfig:
    """A tight KV pool and budget so that preemption, chunking and queueing all happen."""
    fields = {f.name: f.default for f in dataclasses.fields(get_policy_info(policy).config_cls)}
    budget = 64 if fields.get("enable_chunked_prefill", True) else 256
    return RunConfig(
        policy=policy,
        engine=engine,
        num_gpu_blocks=blocks,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        max_model_len=256,
        block_size=16,
        seed=seed,
        latency_model="roofline",
        **kw,
    )


def assert_accounted(res) -> None:
    """Every request finished, was aborted, or errored; outputs never exceed the target."""
    req = res.requests
    assert req["finish_reason"].notna().all(), req[req["finish_reason"].isna()]
    stopped = req[req["finish_reason"] == "stop"]
    assert (stopped["num_output_tokens"] == stopped["target_output_tokens"]).all()
    length = req[req["finish_reason"] == "length"]
    assert (length["num_output_tokens"] <= length["target_output_tokens"]).all()
    assert res.summary["num_finished"] + res.summary["num_aborted"] + res.summary["num_errored"] == len(req)
