"""Property test of the KV-connector bookkeeping: random interleavings of loads and sends ending
(finished_recving / finished_sending / failed loads) with aborts, on both vLLM schedulers, keep
every KV block accounted for, hold blocks exactly while a transfer needs them, and account for
every request (each finishes once; nothing stays held once the transfers have ended)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.policies import KVTransferParams, Request, RequestStatus, StepResult, make_policy

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

EOS = 2


def _requests(rng: random.Random, block_size: int) -> list[tuple[int, Request]]:
    """(arrival step, request): colocated, prefill-side and decode-side requests mixed."""
    out = []
    for i in range(rng.randint(1, 12)):
        n = rng.randint(1, 100)
        kind = rng.choice(["plain", "prefill", "prefill", "decode", "decode"])
        params = None
        max_tokens = rng.randint(1, 30)
        if kind == "prefill":
            params = KVTransferParams(do_remote_decode=True, remote_engine_id=1)
            max_tokens = rng.choice([1, 1, 3])
        elif kind == "decode":
            params = KVTransferParams(do_remote_prefill=True, remote_engine_id=0)
        hashes = tuple(rng.choice([1, 2]) for _ in range(n // block_size))
        req = Request(f"q{i}", float(i), n, max_tokens, prompt_block_hashes=hashes, kv_transfer_params=params)
        out.append((rng.randint(0, 25), req))
    return out


class _Cluster:
    """The other side of every transfer: starts what plans list, ends them at random."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.recving: set[str] = set()
        self.sending: set[str] = set()
        self.loads_started: list[str] = []
        self.sends_started: list[str] = []

    def start(self, policy, plan) -> None:
        """Transfers of a launched plan: each load once, of a request loading remote KV."""
        for rid, n in plan.kv_reqs_to_recv.items():
            if n == 0:
                assert rid not in policy.requests  # a notification for a request finished early
                continue
            assert policy.requests[rid].status == RequestStatus.WAITING_FOR_REMOTE_KVS
            assert rid not in self.loads_started, f"{rid} loaded twice"
            self.loads_started.append(rid)
            self.recving.add(rid)
        for rid, n in plan.kv_reqs_to_send.items():
            request = policy.requests[rid]
            assert request.is_finished and n == request.num_computed_tokens > 0
            assert rid not in self.sends_started, f"{rid} sent twice"
            self.sends_started.append(rid)
            self.sending.add(rid)

    def end_some(self, drain: bool) -> tuple[set[str], set[str], set[str]]:
        """(finished_recving, failed loads, finished_sending) for the next result."""
        rng = self.rng
        recv = {r for r in sorted(self.recving) if drain or rng.random() < 0.3}
        failed = {r for r in sorted(recv) if rng.random() < 0.25}
        send = {r for r in sorted(self.sending) if drain or rng.random() < 0.3}
        self.recving -= recv
        self.sending -= send
        return recv - failed, failed, send


def _check_held(policy, cluster: _Cluster, pending: set[str]) -> None:
    """Just after a plan launched: blocks are held only while a transfer needs them (or the
    result reporting its end is still in flight), and every load not yet ended is running."""
    for rid, request in policy.requests.items():
        if request.is_finished:
            assert rid in cluster.sending | cluster.recving | pending, f"{rid} held with no transfer"
        if (
            request.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            and rid not in policy.finished_recving_kv_req_ids
        ):
            assert rid in cluster.recving | pending, f"{rid} waits for a load that is not running"


def _run(seed: int, name: str) -> None:
    rng = random.Random(seed)
    bs = rng.choice([4, 16])
    mml = 128
    policy = make_policy(
        name,
        block_size=bs,
        num_gpu_blocks=-(-mml // bs) + 1 + rng.choice([0, 0, 4, 40]),
        max_num_seqs=rng.choice([1, 3, 8]),
        max_num_batched_tokens=rng.choice([16, 64, 256]),
        max_model_len=mml,
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice([0, 8]),
        kv_role=rng.choice(["kv_both", "kv_consumer", "kv_producer"]),
        kv_load_failure_policy=rng.choice(["recompute", "fail"]),
    )
    work = _requests(rng, bs)
    ids = {r.request_id for _, r in work}
    aborts = {rng.randint(0, 40): r.request_id for _, r in work if rng.random() < 0.25}
    cluster = _Cluster(rng)
    queue: list = []
    finished: list[str] = []
    for t in range(800):
        for arrival, request in work:
            if arrival == t:
                policy.add_request(request)
        if t in aborts:
            policy.abort_requests([aborts[t]])
        plan = policy.schedule()
        finished.extend(plan.finished_req_ids)
        cluster.start(policy, plan)
        pending = set()
        for _, res in queue:
            pending |= res.finished_recving | res.failed_kv_load_ids | res.finished_sending
        _check_held(policy, cluster, pending)
        drain = t > 200
        recv, failed, send = cluster.end_some(drain)
        sampled = {}
        for rid in plan.num_scheduled_tokens:
            request = policy.requests[rid]
            sampled[rid] = [] if request.is_prefill_chunk else [EOS if rng.random() < 0.1 else 100]
        queue.append(
            (
                plan,
                StepResult(
                    plan.step_id,
                    sampled_token_ids=sampled,
                    finished_recving=recv,
                    failed_kv_load_ids=failed,
                    finished_sending=send,
                ),
            )
        )
        if len(queue) >= policy.max_concurrent_batches:
            policy.update_from_output(*queue.pop(0))
        policy.check_invariants()
        if t > 26 and not policy.has_requests() and not cluster.recving and not cluster.sending:
            break
    for plan, result in queue:
        policy.update_from_output(plan, result)
    finished.extend(policy.schedule().finished_req_ids)
    assert not policy.requests and not policy.kv.req_to_blocks, "requests or blocks left behind"
    assert not cluster.recving and not cluster.sending and not policy.has_kv_transfers_in_flight()
    assert sorted(finished) == sorted(ids), "a request finished twice or never"
    stopped = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
    for _, request in work:
        assert request.is_finished
        params = request.kv_transfer_params
        if params is not None and params.do_remote_decode and policy.requires_kv_delivery:
            # a producer hands off the KV of every prefill that stopped (none is lost to a
            # preemption whose in-flight output would otherwise finish it without blocks)
            assert (request.status in stopped) == (request.request_id in cluster.sends_started)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(["vllm", "vllm-async"]))
def test_random_transfer_interleavings_conserve_blocks_and_requests(seed, name):
    _run(seed, name)


def _colocated_log(seed: int, kv_role: str | None) -> list:
    """Step log of a random colocated workload (no kv_transfer_params) on `vllm`."""
    rng = random.Random(seed)
    policy = make_policy(
        "vllm",
        block_size=16,
        num_gpu_blocks=rng.choice([9, 12, 40]),
        max_num_seqs=rng.choice([2, 8]),
        max_num_batched_tokens=rng.choice([32, 128]),
        max_model_len=128,
        kv_role=kv_role,
    )
    work = [
        (rng.randint(0, 20), Request(f"q{i}", float(i), rng.randint(1, 100), rng.randint(1, 30)))
        for i in range(rng.randint(1, 10))
    ]
    log = []
    for t in range(500):
        for arrival, request in work:
            if arrival == t:
                policy.add_request(request)
        plan = policy.schedule()
        sampled = {
            rid: [] if policy.requests[rid].is_prefill_chunk else [100] for rid in plan.num_scheduled_tokens
        }
        outs = policy.update_from_output(plan, StepResult(plan.step_id, sampled_token_ids=sampled))
        policy.check_invariants()
        assert not plan.kv_reqs_to_recv and not plan.kv_reqs_to_send
        log.append(
            (
                plan.num_scheduled_tokens,
                plan.preempted_req_ids,
                [(o.request_id, o.finish_reason) for o in outs],
            )
        )
        if t > 20 and not policy.has_requests():
            break
    return log


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), kv_role=st.sampled_from(["kv_producer", "kv_consumer", "kv_both"]))
def test_a_connector_leaves_colocated_requests_alone(seed, kv_role):
    # one batch in flight: no deferred frees, no in-flight output at a preemption
    assert _colocated_log(seed, kv_role) == _colocated_log(seed, None)
