"""RunConfig validation and resolution; the workload oracle's rules."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from schedsim import RunConfig
from schedsim.policies import Request, StepPlan
from schedsim.run.resolve import resolve_run
from schedsim.worlds.executor import SimExecutor
from schedsim.worlds.oracle import (
    _PHI,
    MASK64,
    PHI_I64,
    TokenDraw,
    WorkloadOracle,
    request_key,
    request_keys,
    synthetic_token,
    to_i64,
    token_objects,
)


@pytest.mark.parametrize(
    "field,value",
    [
        ("tp", 0),
        ("block_size", 0),
        ("rate", -1.0),
        ("max_requests", 0),
        ("gpu_memory_utilization", 1.5),
        ("spec_acceptance_rate", 2.0),
        ("engine", "turbo"),
        ("num_gpu_blocks", 1),
        ("cpu_cost_scale", -1.0),
        ("scheduling_policy", "lifo"),
        ("seed", -3),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        RunConfig(**{field: value})


def test_every_field_has_help() -> None:
    for f in dataclasses.fields(RunConfig):
        assert f.metadata.get("help"), f.name


def test_resolved_fills_defaults_and_describes_models() -> None:
    res = resolve_run(RunConfig(max_num_seqs=64)).describe()
    json.dumps(res)  # JSON-ready
    assert res["num_gpu_blocks"] > 1000  # from H100 memory for an 8B model
    assert res["max_model_len"] >= 8192
    assert res["resolved_policy_options"]["max_num_seqs"] == 64
    assert "latency_model_description" in res and "cpu_model_description" in res


def test_policy_options_may_not_shadow_run_fields() -> None:
    with pytest.raises(ValueError, match="max_num_seqs"):
        resolve_run(RunConfig(policy_options={"max_num_seqs": 3})).describe()


def test_unknown_policy_option_is_named() -> None:
    with pytest.raises(ValueError, match="bogus"):
        resolve_run(RunConfig(policy_options={"bogus": 1}, num_gpu_blocks=100)).describe()


def _oracle(target: int, p: float = 0.5) -> WorkloadOracle:
    o = WorkloadOracle(seed=5, acceptance_rate=p)
    o.add("a", target)
    return o


def _executor(o: WorkloadOracle) -> SimExecutor:
    """An executor over `o` whose every step takes 10 ms."""
    return SimExecutor(o, type("L", (), {"step_time": lambda self, s: 0.01})())


def test_eos_exactly_at_target_and_never_elsewhere() -> None:
    o = _oracle(7)
    req = Request("a", 0.0, 4, 100)
    toks = [o.token(req, i) for i in range(50)]
    assert toks[6] == req.eos_token_id
    assert req.eos_token_id not in toks[:6] + toks[7:]
    assert toks == [o.token(req, i) for i in range(50)]  # deterministic
    other = WorkloadOracle(seed=6)
    other.add("a", 7)
    assert toks != [other.token(req, i) for i in range(50)]


def test_acceptance_rate_is_respected_by_seeded_draws() -> None:
    o = _oracle(10**6, p=0.6)
    drafts = [o.num_accepted("a", i, 1) for i in range(4000)]
    assert abs(sum(drafts) / 4000 - 0.6) < 0.04
    assert all(0 <= o.num_accepted("a", i, 3) <= 3 for i in range(100))


def test_prefill_chunk_samples_nothing_and_final_chunk_samples_first_token() -> None:
    o = _oracle(3)
    ex = _executor(o)
    req = Request("a", 0.0, 40, 10)
    chunk = StepPlan(
        num_scheduled_tokens={"a": 32},
        total_num_scheduled_tokens=32,
        context_lens={"a": 0},
        new_req_ids=["a"],
    )
    h = ex.launch(chunk, {"a": req})
    assert h.result.sampled_token_ids == {"a": []} and h.num_prefill_reqs == 1
    last = StepPlan(num_scheduled_tokens={"a": 8}, total_num_scheduled_tokens=8, context_lens={"a": 32})
    h = ex.launch(last, {"a": req})
    assert h.result.sampled_token_ids == {"a": [o.token(req, 0)]}
    req.output_token_ids.append(o.token(req, 0))
    dec = StepPlan(num_scheduled_tokens={"a": 1}, total_num_scheduled_tokens=1, context_lens={"a": 40})
    h = ex.launch(dec, {"a": req})
    assert h.num_decode_reqs == 1 and h.result.sampled_token_ids["a"] == [o.token(req, 1)]


def test_recompute_after_preemption_is_a_prefill_and_resumes_at_the_right_position() -> None:
    o = _oracle(20)
    ex = _executor(o)
    req = Request("a", 0.0, 10, 30)
    req.output_token_ids.extend(o.token(req, i) for i in range(5))
    plan = StepPlan(
        num_scheduled_tokens={"a": 15},
        total_num_scheduled_tokens=15,
        context_lens={"a": 0},
        resumed_req_ids=["a"],
    )
    h = ex.launch(plan, {"a": req})
    assert h.num_prefill_reqs == 1 and h.num_prefill_tokens == 15
    assert h.result.sampled_token_ids["a"] == [o.token(req, 5)]


def test_a_plan_that_schedules_nothing_still_forgets_its_finished_requests() -> None:
    """An idle engine's plan schedules nothing but reports the last finishes: the runner and the
    oracle drop those requests all the same (a long replay with idle spells keeps no state of
    finished requests)."""
    o = _oracle(1)
    ex = _executor(o)
    req = Request("a", 0.0, 10, 30)
    prefill = StepPlan(
        num_scheduled_tokens={"a": 10},
        total_num_scheduled_tokens=10,
        context_lens={"a": 0},
        new_req_ids=["a"],
    )
    assert ex.launch(prefill, {"a": req}).result.sampled_token_ids["a"] == [req.eos_token_id]
    assert "a" in ex.workers and "a" in o.info
    ex.launch(StepPlan(finished_req_ids=["a"]), {})  # nothing scheduled
    assert "a" not in ex.workers and "a" not in o.info


def test_kv_load_failure_fires_once() -> None:
    o = WorkloadOracle(seed=0, kv_load_failures=["a"])
    o.add("a", 5)
    assert o.kv_load_fails("a") and not o.kv_load_fails("a")


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"eos_token_id": 5},
        {"eos_token_id": 5, "ignore_eos": True},
        {"eos_token_id": None},
        {"stop_token_ids": "row"},
    ],
    ids=["eos", "eos_in_vocab", "ignore_eos", "no_eos", "stop_ids"],
)
def test_tokens_run_equals_token_at_each_position(kw: dict) -> None:
    o = WorkloadOracle(seed=7, vocab_size=12)  # a small vocabulary: synthetic ids hit EOS and stops
    o.add("r", 30)
    if kw.get("stop_token_ids") == "row":
        kw = {"stop_token_ids": tuple(o.tokens(Request("r", 0.0, 4, 40), 0, 6)[:2])}
    req = Request("r", 0.0, 4, 40, **kw)
    one = [o.token(req, i) for i in range(40)]
    for first, count in ((0, 40), (5, 30), (29, 1), (17, 9)):
        assert o.tokens(req, first, count) == one[first : first + count]
    if req.eos_token_id is not None and not req.ignore_eos:
        assert one[29] == req.eos_token_id and req.eos_token_id not in one[:29]
    elif req.eos_token_id is not None:
        assert req.eos_token_id not in one  # synthetic ids equal to EOS were remapped
    assert not set(one) & set(req.stop_token_ids)


# rows of 1, 3 and 40 tokens (a vocabulary of 12: the synthetic ids hit EOS and stop ids)
@pytest.mark.parametrize("count", [1, 3, 40])
def test_token_rows_equal_token_for_mixed_requests(count: int) -> None:
    o = WorkloadOracle(seed=3, vocab_size=12)  # synthetic ids hit EOS and stop ids
    reqs = [
        Request("a", 0.0, 4, 80),
        Request("b", 0.0, 4, 80, eos_token_id=5),
        Request("c", 0.0, 4, 80, eos_token_id=5, ignore_eos=True),
        Request("d", 0.0, 4, 80, eos_token_id=None, stop_token_ids=(6, 7)),
    ]
    for r, target in zip(reqs, (2, 9, 30, 41), strict=True):
        o.add(r.request_id, target)
    o.info["a"] = (to_i64((1 << 64) - 2), 1)  # a key at the top of the range: the grid must wrap
    for r, n in zip(reqs, (0, 6, 24, 37), strict=True):
        r.output_token_ids = [3] * n
    draws = [TokenDraw(*o.info[r.request_id]) for r in reqs]
    for shift in (0, 1):  # from the next output position (sync), or the one after (async)
        rows = o.token_rows(reqs, draws, shift, count)
        for r, row in zip(reqs, rows, strict=True):
            first = len(r.output_token_ids) + shift
            assert row == [o.token(r, first + j) for j in range(count)], r.request_id


def test_sampled_tokens_are_the_vocabularys_shared_objects() -> None:
    """A decode's token and a jump's rows are the objects of `token_objects`, not new ints: a
    step allocates none, and every oracle of one vocabulary shares the one table."""
    o = _oracle(10**6)
    assert o.vocab is WorkloadOracle(seed=1).vocab is token_objects(32000)
    assert o.vocab == tuple(range(32000))
    req = Request("a", 0.0, 4, 100)
    req.output_token_ids.extend(o.vocab[o.token(req, i)] for i in range(3))
    plan = StepPlan(num_scheduled_tokens={"a": 1}, total_num_scheduled_tokens=1, context_lens={"a": 6})
    (tok,) = _executor(o).launch(plan, {"a": req}).result.sampled_token_ids["a"]
    assert tok == o.token(req, 3) > 256 and tok is o.vocab[tok]
    (row,) = o.token_rows([req], [TokenDraw(*o.info["a"])], 0, 20)
    assert row == [o.token(req, 3 + i) for i in range(20)]
    assert all(t is o.vocab[t] for t in row) and max(row) > 256


@pytest.mark.parametrize("key", [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 2])
def test_synthetic_token_is_the_unsigned_formula(key: int) -> None:
    """The signed 64-bit multiplier and wrap give the bits of the exact unsigned product."""
    assert PHI_I64 == _PHI - (1 << 64)
    for index, span in ((0, 7), (5, 1000), (1 << 20, 128_000)):
        exact = 3 + ((((key + index) * _PHI) & MASK64) >> 32) % span
        assert synthetic_token(to_i64(key), index, span) == exact


@given(st.integers(0, 1 << 80), st.lists(st.text(max_size=12), max_size=20))
def test_request_keys_equal_request_key_of_each(seed: int, ids: list[str]) -> None:
    """The vectorised keys (numpy's wrapping uint64) are the big-integer formula's, signed."""
    assert request_keys(seed, ids).tolist() == [to_i64(request_key(seed, rid)) for rid in ids]


def test_a_precomputed_key_plays_the_same_tokens_and_draws() -> None:
    given_key, own = WorkloadOracle(seed=9), WorkloadOracle(seed=9)
    given_key.add("r-7", 30, request_keys(9, ["r-7"]).item(0))
    own.add("r-7", 30)
    req = Request("r-7", 0.0, 4, 100)
    assert given_key.info == own.info
    assert [given_key.token(req, i) for i in range(40)] == [own.token(req, i) for i in range(40)]
    assert [given_key.num_accepted("r-7", i, 3) for i in range(50)] == [
        own.num_accepted("r-7", i, 3) for i in range(50)
    ]
