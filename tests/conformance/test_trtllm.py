"""`schedsim conformance` on TensorRT-LLM scenarios: step logs identical to TensorRT-LLM's own
schedulers (golden logs in conformance/golden), for every cause of divergence, every capacity policy
and every chunking mode; where TensorRT-LLM fails or wedges, the replay stops with the same finding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from schedsim.conformance.trtllm import run_scenario
from schedsim.policies.trtllm import SchedulerWedged, TrtllmFailure

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


HERE = Path(__file__).resolve().parent / "trtllm"
SCENARIOS = sorted((HERE / "scenarios").glob("*.json"))
GOLDEN = HERE / "golden"


def _empty(line: dict) -> bool:
    """A step that ran nothing, paused nothing and finished nothing."""
    return not (line["ctx"] or line["gen"] or line["paused"] or line["finished"])


def test_every_cause_is_covered_under_every_policy_and_chunking_mode():
    combos: dict[str, set[tuple[str, object]]] = {}
    for path in SCENARIOS:
        sc = json.loads(path.read_text())
        combos.setdefault(sc["name"].split("__")[0], set()).add((sc["policy"], sc["config"]["chunking"]))
    causes = {name.split("_")[0] for name in combos}
    assert causes >= {f"c{i}" for i in range(1, 9)} | {"x9", "x10", "x11", "x12"}
    assert all(len(c) == 16 for c in combos.values()), "a base misses a policy x chunking variant"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_step_log_identical_to_tensorrt_llm(path: Path):
    scenario = json.loads(path.read_text())
    name = scenario["name"]
    log: list[dict] = []
    failure = GOLDEN / f"{name}.err"
    if failure.exists():  # TensorRT-LLM fails at that step: the replay stops there, with the cause
        step = int(re.search(r"step (\d+)", failure.read_text()).group(1))
        with pytest.raises(TrtllmFailure) as info:
            run_scenario(scenario, log)
        assert not isinstance(info.value, SchedulerWedged)
        assert info.value.step == step and len(log) == step
        text = failure.read_text()
        assert info.value.cause == ("token-budget" if "forward pass needs" in text else "kv-cache-exhausted")
        return
    golden = [json.loads(line) for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines()]
    wedge = GOLDEN / f"{name}.wedge.json"
    if wedge.exists():  # TensorRT-LLM hangs: no step after the wedge schedules anything
        seen = json.loads(wedge.read_text())
        with pytest.raises(SchedulerWedged) as info:
            run_scenario(scenario, log)
        w = info.value.step
        assert w <= seen["step"] and log == golden[:w] and all(_empty(line) for line in golden[w:])
        started = [r["id"] for r in seen["requests"] if r["started"]]
        assert set(started) <= set(info.value.request_ids)
        return
    assert run_scenario(scenario) == golden
