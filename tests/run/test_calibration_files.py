"""A run uses the calibration files its config names, and records them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from schedsim import RunConfig, simulate


def _small(**kw: object) -> RunConfig:
    return RunConfig(max_requests=30, num_gpu_blocks=2000, max_model_len=8192, **kw)


def test_cpu_cost_file_changes_cpu_time_and_is_recorded(tmp_path):
    cal = {
        "kind": "cpu-cost",
        "scale": 1.0,
        "source": "test",
        "phases": {"schedule": {"base": 0.004, "per_req": 0.0, "per_token": 0.0}},
    }
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(cal))
    base = simulate(_small())
    slow = simulate(_small(cpu_cost_file=str(path)))
    assert slow.config["cpu_cost_file"] == str(path)
    sched = slow.timeline[slow.timeline["kind"] == "schedule"]
    assert np.allclose((sched["end"] - sched["start"]).to_numpy(), 0.004)
    assert slow.summary["cpu_busy_s"] > base.summary["cpu_busy_s"]


def test_fitted_latency_calibration_drives_step_times(tmp_path):
    rows = [
        {"step_time_ms": 5.0 + 0.01 * p + 0.2 * d, "prefill_tokens": p, "decode_count": d}
        for p in (0, 64, 256, 1024)
        for d in (0, 1, 8, 32)
        if p or d
    ]
    csv = tmp_path / "steps.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    from schedsim.latency.calibrate import calibrate_from_args

    class Args:
        profile = None
        steps = str(csv)
        cpu = False
        out = str(tmp_path / "cal.json")
        model, gpu, tp, policy = "llama-3.1-8b", "h100-sxm", 1, "vllm"

    path, _ = calibrate_from_args(Args)
    res = simulate(_small(latency_model="fitted", latency_calibration=str(path)))
    assert res.config["latency_calibration"] == str(path)
    assert "fitted" in json.dumps(res.config["latency_model_description"]).lower()
    fwd = res.timeline[res.timeline["kind"] == "forward"]
    assert (fwd["end"] - fwd["start"]).min() >= 0.005 * 0.9


def test_missing_cpu_cost_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="nope.json"):
        simulate(_small(cpu_cost_file=str(tmp_path / "nope.json")))
