"""Scenario tests of vLLM's KV connector semantics (prefill/decode disaggregation), driven by
hand-built StepResults: decode side WAITING_FOR_REMOTE_KVS, prefill side delayed block frees,
failed loads, aborts in each waiting state, the async scheduler, fast-forward declining.

Pool: block_size 16, 100 blocks (99 usable) unless a test says otherwise."""

from __future__ import annotations

import pytest
from schedsim.policies import KVTransferParams, RequestOutput, RequestStatus, StepResult
from schedsim.policies.interface import SupportsKVTransfer
from support.vllm_helpers import make, mkreq

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

USABLE = 99


def _policy(name: str = "vllm", kv_role: str = "kv_both", **cfg):
    opts = dict(
        num_gpu_blocks=USABLE + 1,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        max_model_len=512,
        kv_role=kv_role,
    )
    opts.update(cfg)
    return make(name, **opts)


def _decode_req(rid: str, n: int, max_tokens: int = 3, tok: int = 7):
    """The decode side's request: the prompt's KV comes from prefill replica 0."""
    return mkreq(rid, n, max_tokens, tok=tok, kv_transfer_params=KVTransferParams(do_remote_prefill=True))


def _prefill_req(rid: str, n: int, tok: int = 7):
    """The prefill side's request: one token, then its KV is held for the remote decode."""
    params = KVTransferParams(do_remote_decode=True, remote_engine_id=1)
    return mkreq(rid, n, 1, tok=tok, kv_transfer_params=params)


def _update(p, plan, sampled=None, **kw):
    """update_from_output with a hand-built result, then the invariants."""
    outs = p.update_from_output(plan, StepResult(plan.step_id, sampled_token_ids=sampled or {}, **kw))
    p.check_invariants()
    return outs


def _used_blocks(p) -> int:
    return USABLE - p.kv.num_free_blocks


# ---------------------------------------------------------------- decode side
def test_remote_prefill_waits_for_kvs_then_recomputes_the_last_prompt_token():
    p = _policy()
    d = _decode_req("d", 40)
    p.add_request(d)
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {} and plan.kv_reqs_to_recv == {"d": 40}
    assert d.status == RequestStatus.WAITING_FOR_REMOTE_KVS and d.num_computed_tokens == 40
    assert p.kv.get_block_ids("d") == [1, 2, 3] and _used_blocks(p) == 3
    assert p.get_request_counts() == (0, 1) and p.has_unfinished_requests()
    assert p.has_kv_transfers_in_flight()
    assert p.kv.num_cached_block.get("d", 0) == 0  # nothing published before the KV lands
    _update(p, plan)
    plan = p.schedule()  # still loading: skipped, and the load is not started twice
    assert plan.num_scheduled_tokens == {} and plan.kv_reqs_to_recv == {}
    assert d.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    _update(p, plan, finished_recving={"d"})
    assert not p.has_kv_transfers_in_flight()
    assert d.status == RequestStatus.WAITING_FOR_REMOTE_KVS  # promoted by the next waiting scan
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"d": 1} and plan.context_lens == {"d": 39}
    assert plan.new_req_ids == ["d"] and plan.block_ids == {"d": [1, 2, 3]}
    assert d.status == RequestStatus.RUNNING and p.kv.num_cached_block["d"] == 2
    outs = _update(p, plan, {"d": [100]})
    assert [(o.request_id, o.new_token_ids) for o in outs] == [("d", [100])]
    assert p.schedule().num_scheduled_tokens == {"d": 1}


def test_remote_prefill_loads_only_past_the_local_prefix_hit():
    p = _policy()
    p.add_request(mkreq("a", 33, 1, tok=7))  # a colocated request caches two blocks of 7s
    plan = p.schedule()
    _update(p, plan, {"a": [100]})
    assert "a" not in p.requests
    d = _decode_req("d", 40)
    p.add_request(d)
    plan = p.schedule()
    hit = p.kv.get_block_ids("d")[:2]
    assert plan.kv_reqs_to_recv == {"d": 8} and d.num_computed_tokens == 40
    assert p.kv.get_block_ids("d") == hit + [3] and _used_blocks(p) == 3
    _update(p, plan, finished_recving={"d"})
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"d": 1} and plan.context_lens == {"d": 39}


def test_the_longest_possible_local_hit_still_loads_the_rest():
    p = _policy()
    p.add_request(mkreq("a", 48, 1, tok=7))
    _update(p, p.schedule(), {"a": [100]})
    d = _decode_req("d", 48)  # a hit is capped at num_tokens - 1: two blocks, one to load
    p.add_request(d)
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 16} and d.status == RequestStatus.WAITING_FOR_REMOTE_KVS


def test_waiting_for_remote_kvs_blocks_nobody_behind_it():
    p = _policy()
    p.add_request(_decode_req("d", 40))
    p.add_request(mkreq("b", 20, 5))
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 40} and plan.num_scheduled_tokens == {"b": 20}
    _update(p, plan, {"b": [100]})
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"b": 1}
    _update(p, plan, {"b": [100]}, finished_recving={"d"})
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"b": 1, "d": 1} and plan.new_req_ids == ["d"]
    assert p.get_request_counts() == (2, 0)


def test_reserved_blocks_of_in_flight_prefills_gate_an_async_load():
    # "a" (200 tokens, cut to 64 by the threshold) keeps 13 - 4 = 9 blocks reserved; "d" needs 7
    def first_plan(usable: int):
        p = _policy(num_gpu_blocks=usable + 1, max_model_len=256, long_prefill_token_threshold=64)
        p.add_request(mkreq("a", 200, 2))
        p.add_request(_decode_req("d", 100))
        return p, p.schedule()

    p, plan = first_plan(19)  # 15 free - 9 reserved = 6 < 7: not admitted
    assert plan.num_scheduled_tokens == {"a": 64} and plan.kv_reqs_to_recv == {}
    assert p.requests["d"].status == RequestStatus.WAITING and not p.kv.get_block_ids("d")
    p, plan = first_plan(20)  # 16 - 9 = 7: admitted
    assert plan.kv_reqs_to_recv == {"d": 100} and len(p.kv.get_block_ids("d")) == 7


# ---------------------------------------------------------------- prefill side
def test_finished_remote_decode_holds_its_blocks_until_finished_sending():
    p = _policy(kv_role="kv_producer")
    r = _prefill_req("p", 40)
    p.add_request(r)
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"p": 40} and plan.kv_reqs_to_send == {}
    outs = _update(p, plan, {"p": [100]})
    assert [(o.request_id, o.finish_reason) for o in outs] == [("p", RequestStatus.FINISHED_LENGTH_CAPPED)]
    assert p.requests["p"] is r and p.kv.get_block_ids("p") == [1, 2, 3] and _used_blocks(p) == 3
    assert p.kv_usage() == pytest.approx(3 / USABLE)
    assert p.get_request_counts() == (0, 0) and not p.has_unfinished_requests()
    assert p.has_requests() and p.has_kv_transfers_in_flight()
    plan = p.schedule()
    assert plan.kv_reqs_to_send == {"p": 40} and plan.finished_req_ids == ["p"]
    assert plan.num_scheduled_tokens == {}
    assert p.abort_requests(["p"]) == []  # finished already: an abort changes nothing
    _update(p, plan)
    assert p.schedule().kv_reqs_to_send == {} and _used_blocks(p) == 3
    _update(p, p.schedule(), finished_sending={"p"})
    assert "p" not in p.requests and _used_blocks(p) == 0 and p.kv_usage() == 0.0
    assert not p.has_requests() and not p.has_kv_transfers_in_flight()
    # the prompt's full blocks stay in the prefix cache
    p.add_request(mkreq("again", 40, 1, tok=7))
    assert p.schedule().context_lens == {"again": 32}


def test_stopped_on_eos_is_held_too_but_an_aborted_prefill_is_freed_at_once():
    p = _policy(kv_role="kv_producer")
    params = KVTransferParams(do_remote_decode=True)
    p.add_request(mkreq("eos", 20, 5, tok=7, kv_transfer_params=params))
    p.add_request(mkreq("cut", 300, 5, tok=8, kv_transfer_params=params))
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"eos": 20, "cut": 236}
    outs = _update(p, plan, {"eos": [2]})
    assert [(o.request_id, o.finish_reason) for o in outs] == [("eos", RequestStatus.FINISHED_STOPPED)]
    assert [r.request_id for r in p.abort_requests(["cut"])] == ["cut"]
    assert "cut" not in p.requests and p.kv.get_block_ids("eos") == [1, 2]
    plan = p.schedule()
    assert plan.kv_reqs_to_send == {"eos": 20} and plan.finished_req_ids == ["eos", "cut"]
    assert _used_blocks(p) == 2


# ---------------------------------------------------------------- failed loads
@pytest.mark.parametrize("also_finished", [False, True])
def test_failed_async_load_recomputes_locally_from_the_local_hit(also_finished):
    p = _policy()
    p.add_request(mkreq("a", 33, 1, tok=7))
    _update(p, p.schedule(), {"a": [100]})
    d = _decode_req("d", 40)
    p.add_request(d)
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 8}
    _update(p, plan, failed_kv_load_ids={"d"}, finished_recving={"d"} if also_finished else set())
    assert d.status == RequestStatus.WAITING_FOR_REMOTE_KVS and d.num_computed_tokens == 0
    assert not p.has_kv_transfers_in_flight()
    plan = p.schedule()  # blocks given back, the local hit found again, the rest computed here
    assert plan.num_scheduled_tokens == {"d": 8} and plan.context_lens == {"d": 32}
    assert plan.kv_reqs_to_recv == {} and plan.new_req_ids == ["d"]
    assert d.status == RequestStatus.RUNNING and _used_blocks(p) == 3


def test_failed_async_load_with_fail_policy_finishes_the_request_with_an_error():
    p = _policy(kv_load_failure_policy="fail")
    p.add_request(_decode_req("d", 40))
    plan = p.schedule()
    outs = _update(p, plan, failed_kv_load_ids={"d"})
    assert [(o.request_id, o.new_token_ids, o.finish_reason) for o in outs] == [
        ("d", [], RequestStatus.FINISHED_ERROR)
    ]
    assert "d" not in p.requests and _used_blocks(p) == 0
    assert p.schedule().finished_req_ids == ["d"]


def test_synchronous_load_failure_path_is_unchanged_with_a_connector():
    p = _policy()
    p.add_request(mkreq("b", 20, 5))
    plan = p.schedule()
    outs = _update(p, plan, {"b": [100]}, failed_kv_load_ids={"b"})
    assert outs == [] and p.requests["b"].num_computed_tokens == 0
    assert p.schedule().num_scheduled_tokens == {"b": 20}


# ---------------------------------------------------------------- aborts while waiting
def test_abort_while_loading_keeps_blocks_until_the_load_ends():
    p = _policy()
    d = _decode_req("d", 40)
    p.add_request(d)
    _update(p, p.schedule())
    assert [r.request_id for r in p.abort_requests(["d"])] == ["d"]
    assert d.status == RequestStatus.FINISHED_ABORTED and p.requests["d"] is d and _used_blocks(p) == 3
    assert p.get_request_counts() == (0, 0) and not p.has_unfinished_requests()
    assert p.has_requests() and p.has_kv_transfers_in_flight()
    plan = p.schedule()
    assert plan.finished_req_ids == ["d"] and plan.kv_reqs_to_recv == {}
    _update(p, plan, finished_recving={"d"})
    assert "d" not in p.requests and _used_blocks(p) == 0 and not p.has_requests()


def test_abort_of_a_failed_load_in_flight_frees_when_the_failure_is_reported():
    p = _policy()
    p.add_request(_decode_req("d", 40))
    _update(p, p.schedule())
    p.abort_requests(["d"])
    _update(p, p.schedule(), failed_kv_load_ids={"d"})
    assert "d" not in p.requests and _used_blocks(p) == 0


def test_abort_after_the_load_ended_frees_at_once():
    p = _policy()
    p.add_request(_decode_req("d", 40))
    _update(p, p.schedule(), finished_recving={"d"})
    p.abort_requests(["d"])
    assert "d" not in p.requests and _used_blocks(p) == 0
    assert not p.finished_recving_kv_req_ids and not p.has_kv_transfers_in_flight()


def test_abort_before_admission_notifies_the_prefill_side_with_zero_tokens():
    p = _policy(max_num_seqs=1)
    p.add_request(mkreq("b", 20, 5))
    p.add_request(_decode_req("d", 40))
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"b": 20} and plan.kv_reqs_to_recv == {}
    p.abort_requests(["d"])
    assert "d" not in p.requests  # no blocks were ever allocated
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 0} and plan.finished_req_ids == ["d"]
    _update(p, plan, {"b": [100]}, finished_recving={"d"})  # an id it no longer holds: ignored
    assert p.get_request_counts() == (1, 0)


# ---------------------------------------------------------------- async scheduler
def test_async_decode_side_defers_block_frees_and_admits_with_a_placeholder():
    p = _policy("vllm-async", kv_role="kv_consumer")
    assert p.config.defer_block_free  # vLLM: a consumer connector with two batches in flight
    d = _decode_req("d", 40)
    p.add_request(d)
    plan0 = p.schedule()
    assert plan0.kv_reqs_to_recv == {"d": 40} and plan0.num_scheduled_tokens == {}
    plan1 = p.schedule()
    assert plan1.kv_reqs_to_recv == {}
    _update(p, plan0, finished_recving={"d"})
    plan2 = p.schedule()
    assert plan2.num_scheduled_tokens == {"d": 1} and plan2.context_lens == {"d": 39}
    assert d.num_output_placeholders == 1 and d.num_computed_tokens == 40
    _update(p, plan1)
    plan3 = p.schedule()
    assert plan3.num_scheduled_tokens == {"d": 1} and d.num_output_placeholders == 2
    outs = _update(p, plan2, {"d": [100]})
    assert [(o.request_id, o.new_token_ids) for o in outs] == [("d", [100])]


def test_async_prefill_side_sends_after_its_only_token():
    p = _policy("vllm-async", kv_role="kv_producer")
    assert not p.config.defer_block_free
    p.add_request(_prefill_req("p", 40))
    plan0 = p.schedule()
    plan1 = p.schedule()  # its in-flight step already reaches max_tokens=1
    assert plan0.num_scheduled_tokens == {"p": 40} and plan1.num_scheduled_tokens == {}
    outs = _update(p, plan0, {"p": [100]})
    assert [o.finish_reason for o in outs] == [RequestStatus.FINISHED_LENGTH_CAPPED]
    plan2 = p.schedule()
    assert plan2.kv_reqs_to_send == {"p": 40} and _used_blocks(p) == 3
    _update(p, plan1)
    _update(p, plan2, finished_sending={"p"})
    assert not p.requests and _used_blocks(p) == 0


# ---------------------------------------------------------------- fast-forward, config
def test_fast_forward_declines_while_a_transfer_is_pending():
    p = _policy()
    p.add_request(mkreq("b", 20, 50))
    _update(p, p.schedule(), {"b": [100]})
    ff = p.fast_forward()
    assert ff.steady_running(1) == [p.requests["b"]]  # a plain decode stretch
    p.add_request(_decode_req("d", 40))
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 40}
    _update(p, plan, {"b": [100]})
    assert not len(p.waiting) and ff.steady_running(1) is None  # the load is in flight
    _update(p, p.schedule(), {"b": [100]}, finished_recving={"d"})
    assert ff.steady_running(1) is None  # loaded, not yet admitted
    _update(p, p.schedule(), {"b": [100], "d": [100]})
    assert ff.steady_running(1) == [p.requests["b"], p.requests["d"]]
    p.add_request(_prefill_req("p", 16))
    _update(p, p.schedule(), {"b": [100], "d": [100], "p": [100]})
    assert ff.steady_running(1) is None  # "p" holds its blocks for the remote decode


def test_kv_config_is_validated_naming_the_field():
    with pytest.raises(ValueError, match=r"VllmConfig\.kv_role"):
        _policy(kv_role="producer")
    with pytest.raises(ValueError, match=r"VllmConfig\.kv_load_failure_policy"):
        _policy(kv_load_failure_policy="retry")
    plain = make("vllm")
    with pytest.raises(ValueError, match="kv_role"):
        plain.add_request(_decode_req("d", 40))
    assert plain.connector is None and not plain.has_kv_transfers_in_flight()
    assert isinstance(_policy(), SupportsKVTransfer) and isinstance(_policy("vllm-async"), SupportsKVTransfer)
    assert not _policy().decode_takes_prefill_token()  # the decode side samples the first token again


def test_outputs_are_request_outputs():
    p = _policy(kv_load_failure_policy="fail")
    p.add_request(_decode_req("d", 40))
    outs = _update(p, p.schedule(), failed_kv_load_ids={"d"})
    assert all(isinstance(o, RequestOutput) for o in outs)


def test_async_producer_drops_the_stale_output_of_a_preempted_prefill():
    # 6 usable blocks: "a" and "p" take 3 each; a's decode needs a 4th and preempts "p" while its
    # only token is in flight. A producer drops that token (vLLM's requires_kv_delivery): "p"
    # must not finish holding no blocks; it is recomputed (32 tokens hit the cache) and held.
    p = _policy("vllm-async", kv_role="kv_producer", num_gpu_blocks=7, max_model_len=96)
    p.add_request(mkreq("a", 48, 3, tok=5))
    r = _prefill_req("p", 48, tok=6)
    p.add_request(r)
    plans = [p.schedule()]
    assert plans[0].num_scheduled_tokens == {"a": 48, "p": 48}
    log = []
    for _ in range(6):
        plan = p.schedule()
        old = plans.pop(0)
        outs = _update(p, old, {rid: [100] for rid in old.num_scheduled_tokens})
        plans.append(plan)
        log.append(
            (
                plan.num_scheduled_tokens,
                plan.preempted_req_ids,
                plan.kv_reqs_to_send,
                [(o.request_id, o.finish_reason) for o in outs],
            )
        )
    assert log == [
        ({"a": 1}, ["p"], {}, [("a", None)]),
        ({"a": 1}, [], {}, [("a", None)]),
        ({}, [], {}, [("a", RequestStatus.FINISHED_LENGTH_CAPPED)]),
        ({"p": 16}, [], {}, []),
        ({}, [], {}, [("p", RequestStatus.FINISHED_LENGTH_CAPPED)]),
        ({}, [], {"p": 48}, []),
    ]
    assert r.output_token_ids == [100] and r.num_preemptions == 1 and p.kv.get_block_ids("p") == [4, 5, 6]


def test_a_one_token_prompt_loaded_in_full_recomputes_its_token_keeping_its_block():
    p = _policy()
    d = _decode_req("d", 1)
    p.add_request(d)
    plan = p.schedule()
    assert plan.kv_reqs_to_recv == {"d": 1} and p.kv.get_block_ids("d") == [1]
    _update(p, plan, finished_recving={"d"})
    plan = p.schedule()
    assert plan.num_scheduled_tokens == {"d": 1} and plan.context_lens == {"d": 0}
    assert plan.block_ids == {"d": [1]} and plan.kv_reqs_to_recv == {}
