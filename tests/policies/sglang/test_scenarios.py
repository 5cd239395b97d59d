"""Scenario tests pinning sglang-overlap's characteristic step plans (fake one-token-per-step model)."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus, StepResult, make_policy  # noqa: E402
from support.schedloop import EOS, make_request, run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def sglang(**kw):
    """A small sglang-overlap policy; keyword options override the defaults here."""
    base = dict(
        num_gpu_blocks=65, block_size=16, max_num_seqs=4, max_model_len=512, max_num_batched_tokens=512
    )
    base.update(kw)
    return make_policy("sglang-overlap", **base)


def test_eos_finish_is_seen_one_iteration_late():
    """'a' samples EOS in step 2; step 3 was planned before that result, so it still decodes 'a'."""
    t = run(sglang(), [make_request("a", 16, 10), make_request("b", 16, 10)], eos_at={"a": 2})
    assert t.sched()[:5] == [
        {"a": 16, "b": 16},
        {"a": 1, "b": 1},
        {"a": 1, "b": 1},
        {"a": 1, "b": 1},
        {"b": 1},
    ]
    assert t.plans[4].finished_req_ids == ["a"]
    assert t.tokens["a"] == [1000, 1001, 2]  # the wasted step-3 token is never delivered
    assert t.finish["a"] == RequestStatus.FINISHED_STOPPED


def test_without_overlap_the_finish_is_seen_at_once():
    """SGLang's normal loop (disable_overlap_schedule) drops 'a' right after its EOS step."""
    p = sglang(disable_overlap_schedule=True)
    assert p.max_concurrent_batches == 1
    t = run(p, [make_request("a", 16, 10), make_request("b", 16, 10)], eos_at={"a": 2})
    assert t.sched()[:4] == [{"a": 16, "b": 16}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"b": 1}]
    assert t.plans[3].finished_req_ids == ["a"]


def test_requests_finishing_by_length_in_flight_are_not_scheduled_again():
    """max_tokens=3: prefill + 2 decodes; the step after the last decode skips 'a'."""
    t = run(sglang(), [make_request("a", 20, 3), make_request("b", 20, 6)])
    assert [s.get("a") for s in t.sched()[:5]] == [20, 1, 1, None, None]
    assert sum(s.get("a", 0) for s in t.sched()) == 20 + 3 - 1
    assert sum(s.get("b", 0) for s in t.sched()) == 20 + 6 - 1
    assert t.tokens["a"] == [1000, 1001, 1002]
    assert t.finish["a"] == RequestStatus.FINISHED_LENGTH_CAPPED


def test_an_eos_as_the_last_allowed_token_is_a_stop():
    """update_finish_state checks stop tokens before the length cap: 'a' samples EOS as its last
    allowed token and is a stop (FINISH_MATCHED_TOKEN); the in-flight skip still applies."""
    t = run(sglang(), [make_request("a", 20, 3), make_request("b", 20, 3)], eos_at={"a": 2})
    assert [s.get("a") for s in t.sched()[:4]] == [20, 1, 1, None]
    assert t.tokens == {"a": [1000, 1001, EOS], "b": [1000, 1001, 1002]}
    assert t.finish == {"a": RequestStatus.FINISHED_STOPPED, "b": RequestStatus.FINISHED_LENGTH_CAPPED}


def test_ignore_eos_also_ignores_stop_token_ids():
    """_check_token_based_finish returns at once under ignore_eos: the stop token id 1001 does not
    stop 'a', which runs to its length cap."""
    a = make_request("a", 20, 4, ignore_eos=True, stop_token_ids=(1001,))
    t = run(sglang(), [a])
    assert t.tokens["a"] == [1000, 1001, 1002, 1003]
    assert t.finish["a"] == RequestStatus.FINISHED_LENGTH_CAPPED


def test_skip_finishing_decode_can_be_switched_off():
    """Without the skip, the length-finishing request runs one wasted decode (like EOS)."""
    t = run(sglang(enable_skip_finishing_decode=False), [make_request("a", 20, 3)])
    assert [s.get("a") for s in t.sched()[:4]] == [20, 1, 1, 1]
    assert t.tokens["a"] == [1000, 1001, 1002]


def test_last_prefill_is_merged_and_decoded_before_its_result_is_processed():
    """Step 1 decodes 'a' on a future token (slot 4) although step 0's result is still pending."""
    t = run(sglang(), [make_request("a", 20, 4)])
    assert t.events[:3] == ["schedule 0", "schedule 1", "update 0"]
    p0, p1 = t.plans[0], t.plans[1]
    assert (p0.forward_mode, p0.future_token_slots) == ("extend", {})
    assert (p1.forward_mode, dict(p1.num_scheduled_tokens)) == ("decode", {"a": 1})
    assert p1.future_token_slots == {"a": 4} and p1.req_pool_indices == {"a": 4}
    assert p1.context_lens == {"a": 20}


def test_future_slots_are_request_pool_rows_reused_last_in_first_out():
    """Rows come from the pool's tail (3, 4); a freed row is the next one handed out."""
    c = make_request("c", 16, 3)
    t = run(sglang(), [make_request("a", 16, 2), make_request("b", 16, 20)], arrivals={3: [c]})
    assert t.plans[0].req_pool_indices == {"a": 3, "b": 4}
    plan_c = next(p for p in t.plans if "c" in p.num_scheduled_tokens)
    assert plan_c.forward_mode == "extend" and plan_c.req_pool_indices == {"c": 3}
    later = next(p for p in t.plans if p.step_id > plan_c.step_id and "c" in p.num_scheduled_tokens)
    # c's first token is still in flight; b's last token arrived before the extend step ended
    assert later.req_pool_indices == {"b": 4, "c": 3} and later.future_token_slots == {"c": 3}


def test_prefill_first_stalls_decodes_unless_mixed_chunk():
    """A newcomer's prefill batch runs alone; with enable_mixed_chunk the decodes ride along."""
    b = make_request("b", 40, 2)
    t = run(sglang(), [make_request("a", 16, 8)], arrivals={3: [b]})
    i = next(i for i, p in enumerate(t.plans) if "b" in p.num_scheduled_tokens)
    assert (t.plans[i].forward_mode, t.sched()[i]) == ("extend", {"b": 40})
    assert t.sched()[i + 1] == {"a": 1, "b": 1}
    b2 = make_request("b", 40, 2)
    t2 = run(sglang(enable_mixed_chunk=True), [make_request("a", 16, 8)], arrivals={3: [b2]})
    j = next(i for i, p in enumerate(t2.plans) if "b" in p.num_scheduled_tokens)
    assert (t2.plans[j].forward_mode, t2.sched()[j]) == ("mixed", {"b": 40, "a": 1})


def test_chunked_prefill_one_chunked_request_at_a_time():
    """chunked_prefill_size 32: 'a' (80) runs 32, 32, 16; 'b' starts as the next chunked request."""
    p = sglang(chunked_prefill_size=32)
    t = run(p, [make_request("a", 80, 2), make_request("b", 40, 2)])
    assert t.sched()[:4] == [{"a": 32}, {"a": 32}, {"a": 16, "b": 16}, {"b": 24}]
    assert [pl.chunked_req_id for pl in t.plans[:4]] == ["a", "a", "b", None]
    assert t.plans[3].forward_mode == "extend"
    assert t.tokens == {"a": [1000, 1001], "b": [1000, 1001]}


def test_new_token_ratio_reserves_running_decodes_at_admission():
    """'b' needs 32+100+16 < free - 100*ratio: admitted at ratio 0.7, refused at ratio 1.0."""
    for ratio, admitted in ((0.7, True), (1.0, False)):
        p = sglang(num_gpu_blocks=17, init_new_token_ratio=ratio)
        p.add_request(make_request("a", 16, 100))
        p.schedule()
        p.add_request(make_request("b", 32, 100))
        plan = p.schedule()
        expected = {"b": 32} if admitted else {"a": 1}
        assert dict(plan.num_scheduled_tokens) == expected, ratio


def test_retract_on_oom_picks_longest_prompt_and_drops_its_inflight_output():
    """16 blocks of 4, ratio 0.1 lets both in; at step 28 the pool is full and 'a' (longer
    prompt, same outputs) is retracted to the back of the queue, its in-flight token dropped."""
    p = sglang(
        num_gpu_blocks=17,
        block_size=4,
        max_num_batched_tokens=64,
        init_new_token_ratio=0.1,
        min_new_token_ratio_factor=1.0,
    )
    seen = {}

    def observe(policy, plan):
        if plan.preempted_req_ids:
            seen["plan"], seen["ratio"] = plan, policy.ratio.current
            seen["waiting"] = [r.request_id for r in policy.waiting]
            seen["a_outputs"] = policy.requests["a"].num_output_tokens

    t = run(p, [make_request("a", 6, 40), make_request("b", 5, 40)], observe=observe)
    plan = seen["plan"]
    assert plan.step_id == 28 and plan.preempted_req_ids == ["a"]
    assert dict(plan.num_scheduled_tokens) == {"b": 1}
    assert seen["waiting"] == ["a"] and seen["a_outputs"] == 26
    # survivors re-estimate the ratio: min(1, (26 outputs + 20 retract steps) / (40 + 1))
    assert seen["ratio"] == 1.0
    resumed = next(pl for pl in t.plans if pl.resumed_req_ids == ["a"])
    assert resumed.forward_mode == "extend"
    assert resumed.context_lens["a"] + resumed.num_scheduled_tokens["a"] == 6 + 26  # recompute
    assert t.tokens["a"] == [1000 + i for i in range(40)]  # the dropped token is sampled again
    assert t.tokens["b"] == [1000 + i for i in range(40)]


def test_ratio_estimate_after_retract_and_decay():
    """The tracker's arithmetic: 0.7 decays to 0.098 over 600 steps; retraction re-estimates."""
    from schedsim.policies.sglang.slots import NewTokenRatioTracker

    tr = NewTokenRatioTracker.from_config(0.7, 1.0, 0.14, 600)
    for _ in range(300):
        tr.decay_step()
    assert abs(tr.current - (0.7 - 300 * (0.7 - 0.098) / 600)) < 1e-12
    for _ in range(400):
        tr.decay_step()
    assert abs(tr.current - 0.098) < 1e-12
    assert NewTokenRatioTracker.after_retract([(10, 100), (30, 200)], 20) == (40 + 40) / 301
    tr.reset()
    assert tr.current == 0.7


def test_eos_as_first_token_still_costs_one_decode_after_the_merge():
    """The prefill's only token is EOS: merged before its result, 'a' decodes once in vain."""
    t = run(sglang(), [make_request("a", 20, 5)], eos_at={"a": 0})
    assert t.sched() == [{"a": 20}, {"a": 1}, {}]
    assert t.tokens == {"a": [2]} and t.plans[2].finished_req_ids == ["a"]


def test_mixed_chunk_budgets_leave_room_for_the_running_decodes():
    """chunked_prefill_size 36 with 2 decodes: 34 left, the new chunk is cut to 32 (a page
    multiple), the continuations take 34 each; every mixed step carries both decodes."""
    c = make_request("c", 100, 2)
    t = run(
        sglang(enable_mixed_chunk=True, chunked_prefill_size=36, block_size=4),
        [make_request("a", 8, 10), make_request("b", 8, 10)],
        arrivals={3: [c]},
    )
    assert t.sched()[3:7] == [
        {"c": 32, "a": 1, "b": 1},
        {"c": 34, "a": 1, "b": 1},
        {"c": 34, "a": 1, "b": 1},
        {"a": 1, "b": 1, "c": 1},
    ]
    assert [p.forward_mode for p in t.plans[3:7]] == ["mixed", "mixed", "mixed", "decode"]


def _ids_request(rid: str, ids: list[int], max_tokens: int = 2):
    """A request with real token ids (prefix-cache hashing by content)."""
    return make_request(rid, len(ids), max_tokens, prompt_token_ids=ids)


def test_lpm_admits_the_longest_cached_prefix_first():
    """After 'p' (64 tokens) finished, 'y' (p + 8) hits 64 cached tokens: lpm admits it before
    the earlier 'x'; fcfs admits 'x'. max_num_seqs=1 makes the order visible."""
    shared = list(range(100, 164))
    for policy, first in (("fcfs", "x"), ("lpm", "y")):
        p = sglang(max_num_seqs=1, schedule_policy=policy)
        run(p, [_ids_request("p", shared)])
        p.add_request(_ids_request("x", list(range(500, 540))))
        p.add_request(_ids_request("y", shared + list(range(900, 908))))
        plan = p.schedule()
        assert list(plan.num_scheduled_tokens) == [first], policy
        if first == "y":
            assert plan.context_lens["y"] == 64 and plan.num_scheduled_tokens["y"] == 8


def test_lpm_deprioritises_a_second_request_with_the_same_uncached_prefix():
    """'b' and 'c' share 48 uncached tokens: 'c' goes behind 'a' so it can hit b's blocks later."""
    common = list(range(100, 148))
    p = sglang(max_num_seqs=1, schedule_policy="lpm")
    for rid, ids in (("b", common + [1, 2]), ("c", common + [3, 4]), ("a", list(range(700, 750)))):
        p.add_request(_ids_request(rid, ids))
    p.schedule()
    assert [r.request_id for r in p.waiting] == ["a", "c"]


# ---- the radix cache, in SGLang scenarios (each expectation checked against SGLang 0.5.23) ----


def _sglang_run(requests: list[tuple[str, list[int], int, int]], **config) -> list[dict]:
    """Replay (id, prompt, max_new_tokens, arrival) requests in SGLang's scenario format."""
    from schedsim.conformance.sglang import run_scenario

    cfg = {
        "pool_tokens": 2000,
        "max_running": 8,
        "chunked_prefill_size": None,
        "max_prefill_tokens": 512,
        "schedule_policy": "fcfs",
        "max_model_len": 512,
        "enable_prefix_caching": True,
    }
    cfg.update(config)
    return run_scenario(
        {
            "name": "t",
            "config": cfg,
            "requests": [
                {"id": i, "prompt": p, "max_new_tokens": n, "arrival": t} for i, p, n, t in requests
            ],
        }
    )


def test_prefix_hits_only_on_kv_computed_and_inserted():
    """a and b share 40 tokens in one batch: both compute them. c arrives while a's prefill is in
    flight: the tree does not have a's prompt yet. d arrives after a's result was processed (end
    of step 1): it hits the 40 shared tokens."""
    shared = list(range(1000, 1040))
    log = _sglang_run(
        [
            ("a", shared + [1], 5, 0),
            ("b", shared + [2], 5, 0),
            ("c", shared + [3], 5, 1),
            ("d", shared + [4], 5, 2),
        ]
    )
    assert [line.get("extend") for line in log[:3]] == [
        [["a", 0, 41], ["b", 0, 41]],
        [["c", 0, 41]],
        [["d", 40, 1]],
    ]


def test_a_retracted_request_keeps_only_its_inserted_prompt():
    """q2 is retracted at step 123 with 55 outputs: its outputs were never inserted and are freed;
    its prompt (inserted when its prefill result came back) stays in the tree, unlocked, so it
    resumes with a 20-token hit and recomputes its 55 outputs."""
    log = _sglang_run(
        [(f"q{i}", list(range(2000 + 100 * i, 2020 + 100 * i)), 65, i) for i in range(3)],
        pool_tokens=150,
        max_prefill_tokens=256,
    )
    retracted = [(line["step"], line["retracted"]) for line in log if "retracted" in line]
    assert retracted == [(123, ["q2"])]
    assert log[123]["decode"] == ["q1"]
    resumed = next(line for line in log[124:] if line["mode"] == "extend")
    assert (resumed["step"], resumed["extend"]) == (133, [["q2", 20, 55]])


def test_eviction_takes_the_least_recently_used_whole_leaf():
    """Three 30-token prompts are cached (a oldest); big's 80 tokens need 20 more than the pool
    has free: a's whole leaf goes, b and c stay; c2 then hits c, a2 misses."""
    a, b, c = list(range(4000, 4030)), list(range(5000, 5030)), list(range(6000, 6030))
    log = _sglang_run(
        [
            ("a", a, 1, 0),
            ("b", b, 1, 2),
            ("c", c, 1, 4),
            ("big", list(range(7000, 7080)), 3, 6),
            ("c2", c + [9], 2, 12),
            ("a2", a + [9], 2, 12),
        ],
        pool_tokens=150,
    )
    assert log[6]["extend"] == [["big", 0, 80]]
    assert log[12]["extend"] == [["c2", 30, 1], ["a2", 0, 31]]


def test_intake_abort_is_reported_by_the_next_update():
    """A prompt of max_req_len - 5 tokens or more is aborted at intake (SGLang's
    validate_input_length): max_model_len 40 gives max_req_len 39, so 34 tokens are too many."""
    p = sglang(max_model_len=40, block_size=4, max_num_batched_tokens=40)
    p.add_request(make_request("long", 34, 3))
    p.add_request(make_request("ok", 33, 3))
    assert p.has_requests() and [r.request_id for r in p.waiting] == ["ok"]
    plan = p.schedule()
    assert list(plan.num_scheduled_tokens) == ["ok"] and plan.finished_req_ids == ["long"]
    outs = p.update_from_output(plan, StepResult(step_id=plan.step_id, sampled_token_ids={"ok": [5]}))
    assert [(o.request_id, o.finish_reason) for o in outs][0] == ("long", RequestStatus.FINISHED_ABORTED)
