"""The CPU-cost model makes async scheduling's gain appear exactly when CPU time ~ GPU time."""

import numpy as np
import pandas as pd
import pytest
from schedsim import RunConfig, simulate


def workload(n: int = 24, prompt: int = 64, output: int = 40) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [f"r{i:02d}" for i in range(n)],
            "arrival_time": np.zeros(n),
            "prompt_tokens": [prompt] * n,
            "output_tokens": [output] * n,
        }
    )


def run(policy: str, scale: float):
    cfg = RunConfig(
        policy=policy,
        model="llama-3.1-8b",
        gpu="h100-sxm",
        latency_model="roofline",
        cpu_cost_scale=scale,
        num_gpu_blocks=2000,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        max_model_len=4096,
    )
    return simulate(cfg, workload=workload()).summary


@pytest.fixture(scope="module")
def gains():
    out = {}
    for scale in (0.0, 1.0, 25.0, 400.0):
        sync, asyn = run("vllm", scale), run("vllm-async", scale)
        ratio = sync["cpu_busy_s"] / max(sync["gpu_busy_s"], 1e-12)
        out[scale] = (ratio, 1 - asyn["duration_s"] / sync["duration_s"])
    return out


def test_no_cpu_cost_no_async_gain(gains):
    ratio, gain = gains[0.0]
    assert ratio == 0.0 and abs(gain) < 0.05  # (async may run one extra, nearly empty step)


def test_gain_peaks_where_cpu_time_is_comparable_to_gpu_time(gains):
    comparable = [s for s, (r, _) in gains.items() if 0.4 < r < 2.5]
    assert comparable, gains  # the sweep must include a comparable point
    best = max(gains[s][1] for s in comparable)
    assert best > 0.25  # async hides min(C, G) of C + G per step
    # a tiny CPU share (default costs on a fast GPU) or a CPU-bound loop gains much less
    for scale, (ratio, gain) in gains.items():
        if ratio < 0.1 or ratio > 10:
            assert gain < best - 0.15, (scale, ratio, gain)
    assert gains[400.0][0] > 10
