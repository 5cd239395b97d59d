"""Fast-forward of the TensorRT-LLM policies on either side of a prefill/decode pair.

No stretch starts while a KV transfer is in flight (its end changes the pool or a request's state at
a step only the cluster knows); once the received requests generate, a jump equals the steps it
replaces: the same pool (free queue, block tables, tree), request fields and counters.
"""

from __future__ import annotations

import dataclasses

import pytest
from schedsim.policies.trtllm import LlmRequest, TrtllmPolicy
from support.trtllm_disagg import TOKEN, colocated, context_only, generation_only, policy, step

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

# every attribute and derived property (methods excluded), interpreted or compiled
FIELDS = [f for f in dir(LlmRequest) if not f.startswith("__") and not callable(getattr(LlmRequest, f))]
FIELDS.remove("request")


def snapshot(p: TrtllmPolicy) -> tuple:
    """Everything a later step reads: the pool, every request's fields, counters, the transceiver."""
    reqs = [
        (
            r.request_id,
            r.request.status,
            r.request.num_computed_tokens,
            tuple(r.request.output_token_ids),
            *(getattr(r, f) for f in FIELDS),
        )
        for r in p.active
    ]
    tc = p.transceiver
    return (
        p.kv.snapshot(),
        reqs,
        p.iter_counter,
        dataclasses.astuple(p.stats),
        (list(tc.receiving), list(tc.complete), list(tc.sending), dict(tc.to_send)),
    )


def test_no_stretch_while_a_send_is_in_flight():
    p = policy()
    p.add_request(colocated("A", 16, 40))
    step(p)
    step(p)
    ff = p.fast_forward()
    assert [r.request_id for r in ff.steady_running(1) or []] == ["A"]
    p.add_request(context_only("C", 16))
    step(p)  # C's context phase: C finishes, its blocks wait for the send
    assert [r.request_id for r in p.active] == ["A"] and p.has_kv_transfers_in_flight()
    assert ff.steady_running(1) is None
    step(p, sent={"C"})
    assert [r.request_id for r in ff.steady_running(1) or []] == ["A"]


@pytest.mark.parametrize("abort", [False, True])
def test_no_stretch_while_a_receive_is_in_flight(abort):
    p = policy()
    p.add_request(colocated("A", 16, 40))
    step(p)
    p.add_request(generation_only("G", 32, 8))
    step(p)  # A generates, G's receive starts
    ff = p.fast_forward()
    if abort:
        p.abort_requests(["G"])
        step(p)  # the abort is reported; A alone is active, but G's blocks still receive
        assert [r.request_id for r in p.active] == ["A"]
    assert ff.steady_running(1) is None
    step(p, recv={"G"})
    if abort:
        assert [r.request_id for r in ff.steady_running(1) or []] == ["A"]
    else:
        assert ff.steady_running(1) is None  # G is TRANS_COMPLETE: its first step is no plain decode
        step(p)
        assert [r.request_id for r in ff.steady_running(1) or []] == ["A", "G"]


@pytest.mark.parametrize("name", ["trtllm:guaranteed-no-evict", "trtllm:max-utilization"])
def test_a_jump_over_received_generations_equals_the_steps(name):
    def received() -> TrtllmPolicy:
        p = policy(name, num_gpu_blocks=12)
        p.add_request(generation_only("G0", 40, 60, hashes=(1, 2)))
        p.add_request(generation_only("G1", 20, 60))
        step(p)
        step(p, recv={"G0", "G1"})
        step(p)  # both generate
        return p

    stepped, jumped = received(), received()
    ff = jumped.fast_forward()
    reqs = ff.steady_running(1)
    assert reqs is not None and [r.request_id for r in reqs] == ["G0", "G1"]
    k = ff.horizon(reqs, 100)
    assert k == 55  # the pool binds: 11 blocks hold G0 up to 96 tokens and G1 up to 76
    for _ in range(k):
        step(stepped)
    ff.advance(reqs, k, [[TOKEN] * k for _ in reqs])
    jumped.check_invariants()
    assert snapshot(stepped) == snapshot(jumped)
