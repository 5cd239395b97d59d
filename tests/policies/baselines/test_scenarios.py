"""Scenario tests pinning each baseline's characteristic step plans (fake one-token-per-step model)."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus, make_policy
from support.schedloop import EOS, make_request, run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def policy(name: str, **kw):
    """A small policy; keyword options override the defaults here."""
    base = dict(num_gpu_blocks=65, block_size=16, max_num_seqs=4, max_model_len=64, max_num_batched_tokens=64)
    base.update(kw)
    return make_policy(name, **base)


def test_orca_runs_whole_prompts_and_waits_when_the_budget_is_short():
    """Budget 64: 'a' (40) runs whole; 'b' (30) does not fit the 24 left, so it waits a step."""
    t = run(policy("orca"), [make_request("a", 40, 3), make_request("b", 30, 2)])
    assert t.sched() == [{"a": 40}, {"a": 1, "b": 30}, {"a": 1, "b": 1}, {}]
    assert t.plans[1].new_req_ids == ["b"]
    assert t.tokens == {"a": [1000, 1001, 1002], "b": [1000, 1001]}


def test_orca_reserves_kv_to_completion_so_it_never_preempts():
    """4 usable blocks: 'a' reserves 16+31 tokens (3 blocks); 'b' needs 3 too and waits for 'a'."""
    t = run(policy("orca", num_gpu_blocks=5), [make_request("a", 16, 32), make_request("b", 16, 32)])
    first_b = next(i for i, s in enumerate(t.sched()) if "b" in s)
    assert t.sched()[0] == {"a": 16} and t.sched()[first_b] == {"b": 16}
    assert t.plans[first_b].finished_req_ids == ["a"]
    assert not any(p.preempted_req_ids for p in t.plans)
    assert len(t.tokens["a"]) == len(t.tokens["b"]) == 32


def test_orca_without_reservation_admits_on_prompt_kv_and_preempts_the_newest():
    """kv_reservation='none': 'b' starts at once; when the pool fills, 'b' is recomputed later."""
    t = run(
        policy("orca", num_gpu_blocks=5, kv_reservation="none"),
        [make_request("a", 16, 32), make_request("b", 16, 32)],
    )
    assert t.sched()[0] == {"a": 16, "b": 16}
    pre = next(p for p in t.plans if p.preempted_req_ids)
    assert pre.preempted_req_ids == ["b"] and dict(pre.num_scheduled_tokens) == {"a": 1}
    assert t.tokens["a"] == t.tokens["b"] == [1000 + i for i in range(32)]


def test_orca_rejects_chunked_prefill():
    """Orca has no chunking: the config says so by name."""
    try:
        policy("orca", enable_chunked_prefill=True)
    except ValueError as e:
        assert "enable_chunked_prefill" in str(e)
    else:
        raise AssertionError("orca accepted chunked prefill")


def test_sarathi_decodes_never_stall_behind_a_prefill():
    """Budget 32: while 'b' (100) is prefilled in chunks, 'a' decodes in every step."""
    b = make_request("b", 100, 2)
    t = run(
        policy("sarathi", max_num_batched_tokens=32, max_model_len=256),
        [make_request("a", 8, 10)],
        arrivals={2: [b]},
    )
    assert t.sched()[:7] == [
        {"a": 8},
        {"a": 1},
        {"a": 1, "b": 31},
        {"a": 1, "b": 31},
        {"a": 1, "b": 31},
        {"a": 1, "b": 7},
        {"a": 1, "b": 1},
    ]
    assert all(list(p.num_scheduled_tokens)[0] == "a" for p in t.plans[1:7])  # decodes first


def test_sglang_by_contrast_stalls_decodes_during_a_chunked_prefill():
    """sglang-overlap (no mixed chunk) runs the chunks alone: 'a' waits until 'b' is prefilled."""
    b = make_request("b", 100, 2)
    t = run(
        make_policy(
            "sglang-overlap",
            num_gpu_blocks=65,
            block_size=16,
            max_num_seqs=4,
            max_model_len=256,
            max_num_batched_tokens=32,
        ),
        [make_request("a", 8, 10)],
        arrivals={2: [b]},
    )
    i = next(i for i, s in enumerate(t.sched()) if "b" in s)
    assert t.sched()[i : i + 5] == [{"b": 32}, {"b": 32}, {"b": 32}, {"b": 4}, {"a": 1, "b": 1}]


def test_sarathi_preempts_the_newest_request_under_kv_pressure():
    """6 usable blocks of 4: both grow until a decode cannot get a block; 'b' (newest) goes back
    to the front of the queue, is recomputed later, and both deliver every token."""
    known = {}

    def observe(pol, plan):
        if plan.resumed_req_ids == ["b"]:
            known["b"] = pol.requests["b"].num_tokens  # prompt + outputs delivered before

    t = run(
        policy("sarathi", num_gpu_blocks=7, block_size=4, max_num_batched_tokens=32),
        [make_request("a", 8, 12), make_request("b", 7, 12)],
        observe=observe,
    )
    pre = next(p for p in t.plans if p.preempted_req_ids)
    assert pre.preempted_req_ids == ["b"] and "b" not in pre.num_scheduled_tokens
    assert pre.new_req_ids == []  # no admission in a step that preempted
    resumed = next(p for p in t.plans if p.resumed_req_ids == ["b"])
    # recompute of prompt + outputs, from the prefix-cached blocks left by the preemption
    assert resumed.context_lens["b"] % 4 == 0 and resumed.context_lens["b"] < known["b"]
    assert resumed.context_lens["b"] + resumed.num_scheduled_tokens["b"] == known["b"] > 7
    assert t.tokens["a"] == t.tokens["b"] == [1000 + i for i in range(12)]


def test_static_admits_nothing_until_the_batch_drains():
    """'c' arrives while 'a','b' run; it starts only after the longest ('b') has finished."""
    c = make_request("c", 10, 2)
    t = run(policy("static"), [make_request("a", 12, 2), make_request("b", 20, 5)], arrivals={1: [c]})
    assert t.sched() == [
        {"a": 12, "b": 20},
        {"a": 1, "b": 1},
        {"b": 1},
        {"b": 1},
        {"b": 1},
        {"c": 10},
        {"c": 1},
        {},
    ]
    assert t.plans[5].finished_req_ids == ["b"]
    assert t.finish["b"] == RequestStatus.FINISHED_LENGTH_CAPPED


def test_static_batch_is_capped_by_max_num_seqs_and_the_token_budget():
    """max_num_seqs 2: 'c' waits for the next batch; the prompts of one batch share the budget."""
    t = run(
        policy("static", max_num_seqs=2),
        [make_request("a", 30, 1), make_request("b", 30, 1), make_request("c", 5, 1)],
    )
    assert t.sched()[:2] == [{"a": 30, "b": 30}, {"c": 5}]
    t2 = run(policy("static"), [make_request("a", 40, 1), make_request("b", 30, 1)])
    assert t2.sched()[:2] == [{"a": 40}, {"b": 30}]


@pytest.mark.parametrize("name", ["orca", "sarathi", "static"])
def test_an_eos_as_the_last_allowed_token_is_a_stop(name):
    """vLLM's check_stop order (EOS, stop token ids, then length): 'a' samples EOS as its third
    and last allowed token and stops; 'b' reaches the same cap on an ordinary token."""
    t = run(policy(name), [make_request("a", 16, 3), make_request("b", 16, 3)], eos_at={"a": 2})
    assert t.tokens == {"a": [1000, 1001, EOS], "b": [1000, 1001, 1002]}
    assert t.finish == {"a": RequestStatus.FINISHED_STOPPED, "b": RequestStatus.FINISHED_LENGTH_CAPPED}


def test_stop_token_ids_stop_a_request_that_ignores_eos():
    """ignore_eos passes over the EOS (output 0); the stop token id 1002 stops it (vLLM's rule)."""
    a = make_request("a", 16, 6, ignore_eos=True, stop_token_ids=(1002,))
    t = run(policy("orca"), [a], eos_at={"a": 0})
    assert t.tokens["a"] == [EOS, 1001, 1002]
    assert t.finish["a"] == RequestStatus.FINISHED_STOPPED and a.stop_reason == 1002


@pytest.mark.parametrize("caching,hit,recomputed", [(True, 8, 8), (False, 0, 16)])
def test_recomputed_tokens_exclude_what_the_prefix_cache_gives_back(caching, hit, recomputed):
    """8 usable blocks of 4: 'b' is preempted with 16 tokens computed and resumes once 'a' is
    done; only what it schedules below those 16 again counts (vLLM's recompute frontier), so the
    two blocks it finds still cached do not."""
    p = policy(
        "sarathi", num_gpu_blocks=9, block_size=4, max_num_batched_tokens=64, enable_prefix_caching=caching
    )
    a, b = make_request("a", 10, 12), make_request("b", 10, 12)
    t = run(p, [a, b])
    resumed = next(plan for plan in t.plans if plan.resumed_req_ids == ["b"])
    assert resumed.context_lens == {"b": hit} and resumed.num_scheduled_tokens == {"b": 17 - hit}
    assert (b.num_preemptions, b.num_recomputed_tokens, a.num_recomputed_tokens) == (1, recomputed, 0)
    assert not p.recompute_frontier
