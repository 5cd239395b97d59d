"""The conformance command line for TensorRT-LLM scenarios: exact log on stdout, exit codes, batch mode,
clear errors for bad scenarios, and the dispatch between the vLLM and TensorRT-LLM replays."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from schedsim.conformance import dispatch, trtllm
from schedsim.conformance.files import ScenarioError

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


CONF = Path(__file__).resolve().parent / "trtllm"
BASE = CONF / "scenarios" / "x9_partial_block_copied.json"
WEDGE = CONF / "scenarios" / "c1_wedge_started_context_behind_new_one.json"
CRASH = CONF / "scenarios" / "c6_over_admission_fails_in_add_sequence.json"


def test_prints_the_step_log_exactly(capsys):
    assert dispatch.main([str(BASE)]) == 0
    assert capsys.readouterr().out == (CONF / "golden" / "x9_partial_block_copied.jsonl").read_text()


def test_tensorrt_llm_failure_exits_3_after_the_steps_before_it(capsys):
    assert dispatch.main([str(CRASH)]) == 3
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 5 and "TensorRT-LLM fails (kv-cache-exhausted): step 5" in out.err
    assert dispatch.main([str(WEDGE)]) == 3
    assert "TensorRT-LLM fails (wedge): step 5" in capsys.readouterr().err


def test_batch_mode_writes_logs_and_reasons(tmp_path):
    out = tmp_path / "out"
    assert dispatch.main([str(BASE), str(CRASH)], batch=str(out)) == 3
    assert (out / "x9_partial_block_copied.jsonl").read_text() == (
        CONF / "golden" / "x9_partial_block_copied.jsonl"
    ).read_text()
    assert not (out / "x9_partial_block_copied.err").exists()
    assert (
        (out / "c6_over_admission_fails_in_add_sequence.err")
        .read_text()
        .startswith("TensorRT-LLM fails (kv-cache-exhausted): step 5")
    )


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s.update(policy="fcfs"), "policy must be one of"),
        (lambda s: s["config"].update(block_sz=4), "unknown keys ['block_sz']"),
        (lambda s: s["config"].update(chunk_unit_size=6), "multiple of block_size"),
        (lambda s: s["config"].update(num_blocks=2), "would shrink the attention window"),
        (lambda s: s["requests"][0].update(prompt=[1] * 31), "(a): prompt (31) > max_input_len (30)"),
        (lambda s: s["requests"][1].update(max_new_tokens=0), "requests[1] (b).max_new_tokens"),
        (lambda s: s["requests"][1].update(id="a"), "requests[1].id missing, not a string or duplicated"),
        (lambda s: s.update(num_steps=-1), "num_steps"),
    ],
)
def test_bad_scenarios_are_rejected_naming_the_field(edit, message):
    sc = json.loads(BASE.read_text())
    edit(sc)
    with pytest.raises(ScenarioError, match=re.escape(message)):
        trtllm.replay(sc)


def test_an_invalid_scenario_file_exits_2_naming_the_field(tmp_path, capsys):
    sc = json.loads(BASE.read_text())
    sc["config"]["chunk_unit_size"] = 6
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(sc))
    assert dispatch.main([str(path)]) == 2
    assert "multiple of block_size" in capsys.readouterr().err


def test_dispatch_sends_each_scenario_to_its_engine(tmp_path, capsys):
    vllm_scenario = {
        "name": "v",
        "policy": "vllm",
        "config": {"num_gpu_blocks": 40},
        "num_steps": 3,
        "requests": [{"id": "r", "prompt_token_ids": [5, 6, 7], "max_tokens": 2}],
    }
    path = tmp_path / "v.json"
    path.write_text(json.dumps(vllm_scenario))
    assert dispatch.main([str(BASE), str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    golden = (CONF / "golden" / "x9_partial_block_copied.jsonl").read_text().splitlines()
    assert lines[: len(golden)] == golden
    first_vllm_step = json.loads(lines[len(golden)])
    assert first_vllm_step == {"step": 0, "scheduled": {"r": 3}, "preempted": [], "finished": []}
    assert dispatch.main([str(CRASH)]) == 3
