"""Step logs of `sglang-overlap` against SGLang 0.5.23's own scheduler (golden logs).

The expected logs were recorded by running SGLang's own code on a CPU (its Scheduler's overlap
loop, PrefillAdder, SchedulePolicy, ScheduleBatch, allocator, UnifiedRadixCache and result
processor; only the model and the IPC edges replaced) on the same scenarios:
- `sglang/hand/`: small scenarios, one rule each (`<class>__<what>`, named in the file list
  of docs/policies-sglang.md), as plain files;
- `sglang/random/<class>.jsonl.gz`: 8 classes x 40 random scenarios (light, starved,
  chunked, shared prefixes with fcfs and lpm, prefix-starved, no cache, bursts), page size 1;
- `sglang/paged/<class>.jsonl.gz`: the same classes with page sizes 2, 4, 8 and 16.
Each gz line is `{"scenario": ..., "expected": <the log>}`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from schedsim.conformance import dispatch
from schedsim.conformance.dispatch import main
from schedsim.conformance.files import ScenarioError, format_log
from schedsim.conformance.sglang import run_scenario

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


HERE = Path(__file__).parent / "sglang"
HAND = sorted((HERE / "hand").glob("*.json"))
BUNDLES = sorted((HERE / "random").glob("*.jsonl.gz")) + sorted((HERE / "paged").glob("*.jsonl.gz"))


def _bundle(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("path", HAND, ids=lambda p: p.stem)
def test_hand_scenario_log_matches_sglang(path):
    expected = path.with_suffix(".expected.jsonl").read_text()
    assert format_log(run_scenario(json.loads(path.read_text()))) == expected


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_random_scenario_logs_match_sglang(path):
    cases = _bundle(path)
    assert len(cases) >= 10
    wrong = []
    for case in cases:
        got = format_log(run_scenario(case["scenario"]))
        if got != case["expected"]:
            exp, act = case["expected"].splitlines(), got.splitlines()
            n = min(len(exp), len(act))
            i = next((i for i in range(n) if exp[i] != act[i]), n)
            wrong.append(
                f"{case['scenario']['name']} line {i}: sglang {exp[i : i + 1]} schedsim {act[i : i + 1]}"
            )
    assert not wrong, "\n".join(wrong)


def test_main_prints_logs_and_writes_a_batch(tmp_path, capsys):
    paths = HAND[:2]
    assert main([str(p) for p in paths]) == 0
    assert capsys.readouterr().out == "".join(p.with_suffix(".expected.jsonl").read_text() for p in paths)
    assert main([str(p) for p in paths], batch=str(tmp_path / "out")) == 0
    for p in paths:
        name = json.loads(p.read_text())["name"]
        expected = p.with_suffix(".expected.jsonl").read_text()
        assert (tmp_path / "out" / f"{name}.jsonl").read_text() == expected


def test_dispatch_sends_each_format_to_its_engine(tmp_path, capsys):
    sg = HAND[0]
    vllm_dir = Path(__file__).parent / "vllm"
    vl = sorted(vllm_dir.glob("*.json"))[0]
    assert dispatch.main([str(sg), str(vl)]) == 0
    out = capsys.readouterr().out
    expected = [sg.with_suffix(".expected.jsonl"), vl.with_suffix(".expected.jsonl")]
    assert out == "".join(p.read_text() for p in expected)


def _scenario(**config) -> dict:
    cfg = {
        "pool_tokens": 200,
        "max_running": 4,
        "chunked_prefill_size": None,
        "max_prefill_tokens": 64,
        "schedule_policy": "fcfs",
        "max_model_len": 128,
        "enable_prefix_caching": True,
    }
    cfg.update(config)
    return {
        "name": "t",
        "config": cfg,
        "requests": [{"id": "a", "prompt": list(range(10)), "max_new_tokens": 3, "arrival": 0}],
    }


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("schedule_policy", "lof", "schedule_policy"),
        ("pool_tokens", 1, "pool_tokens"),
        ("max_running", 0, "max_running"),
        ("chunked_prefill_size", 0, "chunked_prefill_size"),
        ("page_size", 3, "pool_tokens"),  # 200 is not a multiple of 3
        ("surprise", 1, "unknown keys"),
    ],
)
def test_invalid_configs_are_named(field, value, message):
    with pytest.raises(ScenarioError, match=message):
        run_scenario(_scenario(**{field: value}))


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_new_tokens", 0),
        ("max_new_tokens", 1000),
        ("prompt", []),
        ("prompt", [100000]),
        ("arrival", -1),
        ("id", 7),
    ],
)
def test_invalid_requests_are_named(field, value):
    sc = _scenario()
    sc["requests"][0][field] = value
    with pytest.raises(ScenarioError, match=field):
        run_scenario(sc)


def test_prompts_sglang_aborts_are_refused():
    """max_req_len = min(max_model_len - 1, pool - 1); SGLang aborts prompts of
    max_req_len - 5 tokens or more (`validate_input_length`)."""
    sc = _scenario(max_model_len=40)  # max_req_len 39: prompts of 34+ tokens are aborted
    sc["requests"][0]["prompt"] = list(range(33))
    assert run_scenario(sc)[0]["extend"] == [["a", 0, 33]]
    sc["requests"][0]["prompt"] = list(range(34))
    with pytest.raises(ScenarioError, match="max_req_input_len 34"):
        run_scenario(sc)


def test_invalid_file_exits_2(tmp_path, capsys):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_scenario(schedule_policy="random")))
    assert main([str(p)]) == 2
    assert "schedule_policy" in capsys.readouterr().err
    assert main([str(p)], batch=str(tmp_path / "out")) == 2
    assert "schedule_policy" in (tmp_path / "out" / "t.err").read_text()
