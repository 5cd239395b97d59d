"""Property tests: KV conservation (check_invariants every step), every request finishes with
exactly its tokens, the same workload gives the same plans (orca, sarathi, static), and aborts
release everything (all four policies of this room)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedsim.policies import RequestStatus, make_policy
from support.schedloop import check_run, make_request, run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

SETTINGS = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

MAX_MODEL_LEN = 40
requests_st = st.lists(
    st.tuples(
        st.integers(1, 24), st.integers(1, 40), st.one_of(st.none(), st.integers(0, 40)), st.integers(0, 2)
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("name", ["orca", "orca-no-reservation", "sarathi", "static"])
@SETTINGS
@given(
    spec=requests_st,
    data=st.data(),
    blocks=st.integers(11, 24),
    seqs=st.integers(1, 6),
    caching=st.booleans(),
    depth=st.sampled_from([None, 2]),
)
def test_baselines_conserve_kv_and_finish_every_request(name, spec, data, blocks, seqs, caching, depth):
    """Tight pools (4-token blocks, 10+ usable: max_model_len fits) force queueing and, for
    sarathi, preemption; orca and static clip max_tokens to what an empty pool can reserve. The
    sync policies are also driven by a batch queue of depth 2 (as the simulator's async engine
    may), where a request whose token is in flight is skipped."""
    arrivals = data.draw(st.lists(st.integers(0, 12), min_size=len(spec), max_size=len(spec)))
    budget = 16 if name == "sarathi" else MAX_MODEL_LEN
    extra = {"kv_reservation": "none"} if name == "orca-no-reservation" else {}
    clipped = name in ("orca", "static")

    def make():
        return make_policy(
            name.split("-")[0],
            **extra,
            num_gpu_blocks=blocks,
            block_size=4,
            max_num_seqs=seqs,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=budget,
            enable_prefix_caching=caching,
        )

    def cap(prompt_len, max_tokens):
        pool = (blocks - 1) * 4 if clipped else 10**9
        return min(max_tokens, MAX_MODEL_LEN - prompt_len, pool - prompt_len)

    check_run(make, spec, arrivals, cap, depth)


@pytest.mark.parametrize("name", ["orca", "sarathi", "sglang-overlap", "static"])
@settings(max_examples=25, deadline=None, derandomize=True)
@given(spec=requests_st, data=st.data(), blocks=st.integers(11, 24), seqs=st.integers(1, 6))
def test_aborts_release_everything_and_others_still_finish(name, spec, data, blocks, seqs):
    """Aborts at random iterations (steps in flight for sglang-overlap) free KV and rows at once."""
    reqs = [make_request(f"r{i}", p, m) for i, (p, m, _, _) in enumerate(spec)]
    when = data.draw(
        st.lists(st.one_of(st.none(), st.integers(0, 30)), min_size=len(spec), max_size=len(spec))
    )
    aborts: dict[int, list[str]] = {}
    for req, it in zip(reqs, when, strict=True):
        if it is not None:
            aborts.setdefault(it, []).append(req.request_id)
    budget = 16 if name in ("sarathi", "sglang-overlap") else MAX_MODEL_LEN
    pol = make_policy(
        name,
        num_gpu_blocks=blocks,
        block_size=4,
        max_num_seqs=seqs,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=budget,
    )
    t = run(pol, reqs, aborts=aborts)
    aborted = {rid for ids in aborts.values() for rid in ids}
    for req in reqs:
        assert req.is_finished, req.request_id
        if req.status == RequestStatus.FINISHED_ABORTED:
            assert req.request_id in aborted
            assert req.request_id not in t.tokens or len(t.tokens[req.request_id]) < req.max_tokens
    # everything released (sglang-overlap's radix tree may keep unlocked, evictable prefixes)
    assert pol.kv_usage() == 0.0 and not pol.kv.req_to_blocks
