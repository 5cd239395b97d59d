"""Random interleavings of a prefill/decode pair's transfer ends, failures and aborts.

A context replica and a generation replica (the same KV-aware capacity policy) take requests; each
step, a random subset of the transfers in flight ends (finished_recving / finished_sending), some
receives fail, some live requests are aborted. Every step keeps the policies' invariants (KV blocks
conserved, every block held by a live request or by a transfer in flight); draining every transfer
returns each pool whole, and every request finishes exactly once. A run may stop where TensorRT-LLM
itself stops (a wedge, or a batch the pool cannot take).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from schedsim.policies import RequestOutput, StepResult
from schedsim.policies.trtllm import TrtllmFailure, TrtllmPolicy
from support.trtllm_disagg import TOKEN, colocated, context_only, generation_only, policy

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

KV_AWARE = ["trtllm:guaranteed-no-evict", "trtllm:static-batch", "trtllm:max-utilization"]
PREFIXES = [None, (1, 2, 3), (1, 2, 4)]


class Side:
    """One replica, the transfers it waits on, and what it finished."""

    def __init__(self, p: TrtllmPolicy) -> None:
        self.p = p
        self.pending: list[str] = []  # transfers in flight, in start order
        self.finished: dict[str, object] = {}
        self.added: set[str] = set()

    def add(self, request) -> None:
        self.p.add_request(request)
        self.added.add(request.request_id)

    def record(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            if out.finish_reason is not None:
                assert out.request_id not in self.finished, f"{out.request_id} finished twice"
                self.finished[out.request_id] = out.finish_reason

    def abort(self, rid: str) -> None:
        if rid in self.p.transceiver.receiving:
            event("aborted while its KV arrives")
        for request in self.p.abort_requests([rid]):
            assert request.request_id not in self.finished, f"{rid} finished twice"
            self.finished[request.request_id] = request.status

    def step(self, ended: list[str], failed: list[str]) -> None:
        """One step; `ended` transfers report their end, `failed` receives fail."""
        p = self.p
        plan = p.schedule()
        self.pending += list(plan.kv_reqs_to_recv) + list(plan.kv_reqs_to_send)
        sampled = {}
        for rid, n in plan.num_scheduled_tokens.items():
            req = p.requests[rid]
            last = not req.is_context_init_state or req.context_current_position + n >= req.prompt_len
            sampled[rid] = [TOKEN] if last else []
        failed = [r for r in dict.fromkeys(failed) if r in self.pending]
        ended = [r for r in dict.fromkeys(ended) if r in self.pending and r not in failed]
        for rid in ended + failed:
            self.pending.remove(rid)
        if failed:
            event("a receive failed")
        if plan.paused_req_ids:
            event("a pause")
        result = StepResult(
            step_id=plan.step_id,
            sampled_token_ids=sampled,
            finished_recving=set(ended),
            finished_sending=set(ended),
            failed_kv_load_ids=set(failed),
        )
        self.record(p.update_from_output(plan, result))
        p.check_invariants()


@st.composite
def programs(draw):
    """Requests for both sides, then a list of per-step actions."""
    reqs = []
    for i in range(draw(st.integers(1, 6))):
        prompt = draw(st.integers(1, 80))
        prefix = draw(st.sampled_from(PREFIXES))
        hashes = None if prefix is None else prefix[: prompt // 16]
        kind = draw(st.sampled_from(["ctx", "gen", "gen", "colocated"]))
        reqs.append((draw(st.integers(0, 6)), f"r{i}", kind, prompt, draw(st.integers(2, 20)), hashes))
    steps = draw(
        st.lists(
            st.tuples(
                st.lists(st.integers(0, 5), max_size=3),  # transfers that end (indices into pending)
                st.lists(st.integers(0, 5), max_size=1),  # receives that fail
                st.lists(st.integers(0, 5), max_size=1),  # aborts (indices into the requests)
            ),
            min_size=1,
            max_size=25,
        )
    )
    return reqs, steps


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from(KV_AWARE), st.integers(8, 24))
def test_transfers_conserve_blocks_and_account_for_every_request(program, name, blocks):
    reqs, steps = program
    ctx = Side(policy(name, num_gpu_blocks=blocks))
    gen = Side(policy(name, num_gpu_blocks=blocks))
    try:
        for i, (ends, fails, aborts) in enumerate(steps):
            for at, rid, kind, prompt, out, hashes in reqs:
                if min(at, len(steps) - 1) != i:
                    continue
                if kind == "ctx":
                    ctx.add(context_only(rid, prompt, hashes))
                elif kind == "gen":
                    gen.add(generation_only(rid, prompt, out, hashes))
                else:
                    gen.add(colocated(rid, prompt, out, hashes))
            for j in aborts:
                rid = reqs[j % len(reqs)][1]
                (ctx if rid in ctx.added else gen).abort(rid)
            for side in (ctx, gen):
                pending = side.pending
                ended = [pending[k % len(pending)] for k in ends] if pending else []
                failed = [pending[k % len(pending)] for k in fails] if pending and side is gen else []
                side.step(ended, failed)
        for _ in range(400):  # drain: every transfer ends, every request runs out
            if not any(s.p.has_requests() or s.p.has_kv_transfers_in_flight() for s in (ctx, gen)):
                break
            for side in (ctx, gen):
                side.step(list(side.pending), [])
    except TrtllmFailure as exc:
        event(f"TensorRT-LLM stops: {exc.cause}")
        return
    event(f"requests finished: {sum(len(s.finished) for s in (ctx, gen))}")
    for side in (ctx, gen):
        p = side.p
        assert not p.has_requests() and not p.has_kv_transfers_in_flight() and not side.pending
        assert p.kv.num_free_blocks == p.kv.num_blocks, "blocks leaked"
        assert set(side.finished) == side.added, "a request never finished"
