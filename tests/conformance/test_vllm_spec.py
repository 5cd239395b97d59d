"""Speculative decoding and structured output against vLLM 0.33.0's real scheduler (golden files).

`vllm_spec/` holds the hand-written scenarios of `support/vllm_spec_handcrafted.py` (one vLLM behaviour
each, listed in its INDEX.md), two that vLLM itself fails on, and 100 random ones of
`support/vllm_spec_scenarios.py` (seeds 0-19 of each kind); every `<name>.expected.jsonl` was
recorded by the oracle harness running vLLM's own scheduler in batch mode. The live diff of random
extended scenarios against the oracle is in test_vllm.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedsim.conformance.dispatch import main
from schedsim.conformance.files import ScenarioError, format_log
from schedsim.conformance.vllm import run_scenario
from support.vllm_spec_handcrafted import CRASH, SC

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


HERE = Path(__file__).parent / "vllm_spec"
GOLDEN = sorted(p for p in HERE.glob("*.json") if p.with_suffix(".expected.jsonl").exists())
CRASHING = sorted(p for p in HERE.glob("*.json") if p.with_suffix(".expected.err").exists())


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_golden_step_log_matches_vllm(path: Path) -> None:
    assert format_log(run_scenario(_load(path))) == path.with_suffix(".expected.jsonl").read_text()


@pytest.mark.parametrize("path", CRASHING, ids=lambda p: p.stem)
def test_vllm_assertion_on_padded_admission_cut_by_threshold(path: Path) -> None:
    with pytest.raises(AssertionError, match="padded admission"):
        run_scenario(_load(path))
    sc = _load(path)
    sc["config"]["long_prefill_token_threshold"] = 1 + sc["config"]["num_spec_tokens"]
    run_scenario(sc)  # a threshold of 1 + k leaves the padding whole


def test_every_handcrafted_scenario_is_recorded_and_indexed() -> None:
    index = (HERE / "INDEX.md").read_text()
    for name in list(SC) + list(CRASH):
        assert (HERE / f"{name}.json").exists() and f"`{name}`" in index
        assert _load(HERE / f"{name}.json") == json.loads(json.dumps(SC.get(name, CRASH.get(name))[0]))
    assert {p.stem for p in CRASHING} == set(CRASH)
    assert len(GOLDEN) == len(SC) + 100


def test_new_log_keys_only_where_the_scenario_uses_them() -> None:
    plain = run_scenario(_load(HERE / "grammar_rows_order_vllm.json"))  # k = 0, structured
    assert list(plain[0]) == ["step", "scheduled", "preempted", "finished", "grammar", "deferred"]
    spec = run_scenario(_load(HERE / "accept_patterns_vllm.json"))  # k = 3, unstructured
    assert list(spec[0]) == ["step", "scheduled", "preempted", "finished", "spec", "accepted"]


def test_batch_mode_writes_logs_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = [HERE / "slot_draft_model_async.json", HERE / "grammar_drafts_vllm.json"]
    out = tmp_path / "out"
    assert main(list(map(str, good)), batch=str(out)) == 0
    for p in good:
        assert (out / f"{p.stem}.jsonl").read_text() == p.with_suffix(".expected.jsonl").read_text()
    assert main([str(CRASHING[0]), str(good[0])], batch=str(out)) == 1
    assert "AssertionError" in (out / f"{CRASHING[0].stem}.err").read_text()
    assert (out / f"{good[0].stem}.jsonl").exists()
    assert main([str(CRASHING[0])]) == 1
    assert "AssertionError" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda sc: sc["config"].update(num_spec_tokens=True), "num_spec_tokens"),
        (lambda sc: sc["config"].update(num_spec_tokens=-1), "num_spec_tokens"),
        (lambda sc: sc["config"].update(spec_method="eagle"), "spec_method"),
        (lambda sc: sc["config"].update(num_spec_tokens=2, spec_method="ngram"), "ngram"),
        (
            lambda sc: sc["config"].update(num_spec_tokens=3, max_num_batched_tokens=3, max_num_seqs=2),
            "max_num_batched_tokens",
        ),
        (lambda sc: sc["requests"][0].update(accept=[]), "accept"),
        (lambda sc: sc["requests"][0].update(accept=[1, -1]), "accept"),
        (lambda sc: sc["requests"][0].update(structured="yes"), "structured"),
        (lambda sc: sc["requests"][0].update(grammar_delay=1), "grammar_delay"),
        (lambda sc: sc["requests"][0].update(structured=True, grammar_delay=-2), "grammar_delay"),
        (lambda sc: sc["requests"][0].update(structured=True, valid_drafts=[True]), "valid_drafts"),
    ],
)
def test_invalid_extensions_are_named(change, field) -> None:
    sc = _load(HERE / "slot_draft_model_async.json")  # vllm-async, draft_model, k = 1
    change(sc)
    with pytest.raises(ScenarioError, match=field):
        run_scenario(sc)
