"""Step logs of our vLLM policies against vLLM 0.33.0's real scheduler (golden files + live oracle).

The golden files in `vllm/` (legacy contract) and in test_vllm_spec.py (speculative decoding,
structured output) were recorded from the oracle, which runs vLLM 0.33.0's own scheduler
(docs/policies-vllm.md). Set SCHEDSIM_ORACLE to the oracle venv's python and SCHEDSIM_ORACLE_DIR
to the folder holding its `vllm_oracle.py` to also diff random scenarios of both contracts live.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedsim.conformance.dispatch import main
from schedsim.conformance.files import ScenarioError, format_log
from schedsim.conformance.vllm import run_scenario
from support.vllm_scenarios import scenario_from_seed, stress_scenario_from_seed, wide_scenario_from_seed
from support.vllm_spec_scenarios import KINDS, spec_scenario_from_seed

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree
HERE = Path(__file__).parent
SCENARIOS = sorted(p for p in (HERE / "vllm").glob("*.json"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_golden_step_log_matches_vllm(path):
    expected = path.with_suffix(".expected.jsonl").read_text()
    got = format_log(run_scenario(json.loads(path.read_text())))
    assert got == expected


def test_cli_main_prints_log_and_rejects_invalid(tmp_path, capsys):
    path = SCENARIOS[0]
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == path.with_suffix(".expected.jsonl").read_text()
    bad = json.loads(path.read_text())
    bad["config"]["num_gpu_blocks"] = 2
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    assert main([str(p)]) == 2
    assert "num_gpu_blocks" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field,value", [("max_tokens", 0), ("eos_after", 0), ("prompt_token_ids", []), ("arrival_step", -1)]
)
def test_invalid_request_fields_are_named(field, value):
    sc = scenario_from_seed(1)
    sc["requests"][0][field] = value
    with pytest.raises(ScenarioError, match=field):
        run_scenario(sc)


_SERVER: list[subprocess.Popen] = []


def _oracle(scenario: dict) -> dict:
    """Ask the persistent oracle process for a scenario's step log."""
    if not _SERVER:
        if not os.environ.get("SCHEDSIM_ORACLE_DIR"):
            pytest.fail("SCHEDSIM_ORACLE is set: SCHEDSIM_ORACLE_DIR must name the folder of vllm_oracle.py")
        env = dict(
            os.environ,
            PYTHONHASHSEED="0",
            VLLM_TARGET_DEVICE="cpu",
            HF_HUB_OFFLINE="1",
            VLLM_LOGGING_LEVEL="ERROR",
        )
        _SERVER.append(
            subprocess.Popen(
                [os.environ["SCHEDSIM_ORACLE"], str(HERE.parent / "support" / "vllm_oracle_server.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
                cwd="/",
            )
        )
    proc = _SERVER[0]
    proc.stdin.write(json.dumps(scenario) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _check_against_oracle(sc: dict) -> None:
    """Our log is deterministic and, with SCHEDSIM_ORACLE set, the oracle's byte for byte (or both
    fail on a vLLM assertion)."""
    try:
        ours = format_log(run_scenario(sc))
    except AssertionError:
        ours = None
    if ours is not None:
        assert ours == format_log(run_scenario(json.loads(json.dumps(sc))))  # same input, same log
    if not os.environ.get("SCHEDSIM_ORACLE"):
        assert ours is not None, json.dumps(sc)
        return
    ans = _oracle(sc)
    if ours is None:
        assert not ans["ok"] and "AssertionError" in ans["error"], json.dumps(sc)
        return
    assert ans["ok"], ans.get("error")
    assert ours == "".join(line + "\n" for line in ans["lines"]), json.dumps(sc)


EXAMPLES = int(os.environ.get("SCHEDSIM_ORACLE_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    kind=st.sampled_from([scenario_from_seed, stress_scenario_from_seed, wide_scenario_from_seed]),
    policy=st.sampled_from(["vllm", "vllm-async"]),
)
def test_random_scenarios_deterministic_and_match_oracle(seed, kind, policy):
    _check_against_oracle(kind(seed, policy))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9), kind=st.sampled_from(KINDS), policy=st.sampled_from(["vllm", "vllm-async"])
)
def test_random_spec_scenarios_deterministic_and_match_oracle(seed, kind, policy):
    _check_against_oracle(spec_scenario_from_seed(seed, kind, policy))
