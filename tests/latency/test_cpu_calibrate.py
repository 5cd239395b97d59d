"""CPU-cost calibration by timing our own policies, and CPU-cost calibration files."""

import json

import pytest
from schedsim.latency import CpuCostModel
from schedsim.latency.cpu_calibrate import calibrate_cpu_costs
from schedsim.latency.cpu_cost import load_cpu_cost


def test_calibrate_times_policy_phases_and_keeps_runner_defaults():
    cfg = calibrate_cpu_costs("vllm", batches=(1, 16, 48), steps=12)
    default = CpuCostModel().config
    assert cfg.phases["prepare_inputs"] == default.phases["prepare_inputs"]
    assert cfg.phases["d2h_copy"] == default.phases["d2h_copy"]
    sched = cfg.phases["schedule"]
    # scheduling 48 running requests costs real time on any machine
    assert sched.base + 48 * sched.per_req > 1e-6
    assert "vllm" in cfg.source
    with pytest.raises(ValueError, match="batches"):
        calibrate_cpu_costs("vllm", batches=(0,))


def test_cpu_cost_file_roundtrip_and_errors(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(
        json.dumps(
            {"kind": "cpu-cost", "scale": 2.0, "phases": {"schedule": {"base": 1e-4, "per_req": 1e-6}}}
        )
    )
    model = load_cpu_cost(str(path))
    assert model.phase_time("schedule", 10, 0) == pytest.approx(2 * (1e-4 + 1e-5))
    from schedsim.latency import make_latency_model

    with pytest.raises(ValueError, match="not a GPU latency calibration"):
        make_latency_model("tiny", "h100", calibration=str(path))
    path.write_text(json.dumps({"kind": "fitted-step"}))
    with pytest.raises(ValueError, match="expected 'cpu-cost'"):
        load_cpu_cost(str(path))
    path.write_text(json.dumps({"phases": {"schedule": {"bse": 1}}}))
    with pytest.raises(ValueError, match="cpu.json"):
        load_cpu_cost(str(path))
