"""Stretches while requests wait: the vLLM schedulers jump when no schedule of the stretch can
admit anyone (every seat taken, or the queue's head short of blocks however the stretch's pool
and its prefix hits change), orca and sarathi likewise as they ask for blocks, SGLang's while its
batch is full, TensorRT-LLM's while its capacity policy stops at a context short of blocks (or
every seat is a generation); arrivals inside are taken at their polls and the head-of-line
tracker judges every schedule. Tables and policy state are identical with fast-forward on and
off, on shared-prefix workloads (hits in the free queue that evictions cut), with the scheduler
options that change the head's demand, and with aborts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig
from schedsim.policies import Request, make_policy
from schedsim.traces import cap_tokens, load_workload
from schedsim.traces.schema import ATTR_PREFIX_BLOCK_SIZE
from support.fastforward import VLLM_JUMPING, assert_same, assert_same_state_when_stopped
from support.workloads import SETTINGS

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

# the policies that jump while some wait
TRTLLM_QUEUED = {
    (f"trtllm:{name}", "sync")
    for name in ("guaranteed-no-evict", "max-utilization", "max-requests", "static-batch")
}
QUEUED = sorted(
    VLLM_JUMPING | TRTLLM_QUEUED | {("sglang-overlap", "async"), ("orca", "sync"), ("sarathi", "sync")}
)


@st.composite
def queued_workloads(draw: st.DrawFn) -> pd.DataFrame:
    """A burst larger than the pool holds, some prompts sharing prefixes (as given block hashes)."""
    n = draw(st.integers(4, 14))
    hashes, prompts = [], []
    for i in range(n):
        shared = draw(st.integers(0, 4))
        own = draw(st.integers(1, 5))
        group = draw(st.integers(0, 1))
        hashes.append(
            tuple(1000 * (group + 1) + j for j in range(shared))
            + tuple(10**6 + 100 * i + j for j in range(own))
        )
        prompts.append(16 * (shared + own) - draw(st.integers(0, 15)))
    gaps = draw(st.lists(st.floats(0.0, 0.03), min_size=n, max_size=n))
    wl = pd.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_time": np.cumsum(gaps),
            "prompt_tokens": prompts,
            "output_tokens": draw(st.lists(st.integers(1, 80), min_size=n, max_size=n)),
            "prompt_block_hashes": hashes,
            "priority": draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
        }
    )
    wl.attrs[ATTR_PREFIX_BLOCK_SIZE] = 16
    return wl


OPTIONS = st.fixed_dictionaries(
    {
        "long_prefill_token_threshold": st.sampled_from([0, 24]),
        "long_prefill_token_threshold_adaptive": st.booleans(),
        "scheduler_reserve_full_isl": st.booleans(),
        "watermark": st.sampled_from([0.0, 0.1]),
    }
)
TRTLLM_OPTIONS = st.fixed_dictionaries(
    {
        "two_step_lookahead": st.booleans(),
        "enable_prefix_aware_scheduling": st.booleans(),
        "started_contexts_in_first_pass": st.booleans(),
        "enable_partial_reuse": st.booleans(),
    }
)


@pytest.mark.parametrize("policy,engine", QUEUED)
@settings(parent=SETTINGS, max_examples=12)
@given(
    wl=queued_workloads(),
    blocks=st.integers(18, 40),
    seqs=st.integers(2, 6),
    options=OPTIONS,
    trtllm_options=TRTLLM_OPTIONS,
    priority=st.booleans(),
    abort=st.booleans(),
    chunked=st.booleans(),
)
def test_random_queues_identical(
    policy: str,
    engine: str,
    wl: pd.DataFrame,
    blocks: int,
    seqs: int,
    options: dict,
    trtllm_options: dict,
    priority: bool,
    abort: bool,
    chunked: bool,
) -> None:
    kw: dict = {}  # what the policy lets a user set: vLLM everything, SGLang the queue's order
    if policy.startswith("vllm"):
        kw = dict(enable_chunked_prefill=chunked, policy_options=options)
    if policy.startswith("trtllm"):  # (the capacity policy's own knobs; FCFS only)
        kw = dict(enable_chunked_prefill=chunked, policy_options=trtllm_options)
    elif not policy.startswith(("orca", "sarathi")):
        kw["scheduling_policy"] = "priority" if priority else "fcfs"
    cfg = RunConfig(
        policy=policy,
        engine=engine,
        num_gpu_blocks=blocks,
        max_num_seqs=seqs,
        max_num_batched_tokens=256,
        max_model_len=256,
        block_size=16,
        latency_model="roofline",
        abort_times={"q1": 0.05, "q3": 0.2} if abort else {},
        **kw,
    )
    assert_same(cfg, workload=wl, check_invariants=True)


def saturated(policy: str, engine: str, **kw) -> tuple[RunConfig, pd.DataFrame]:
    """The saturated benchmark's configuration at a test's size: KV binds before the seats (but
    for trtllm:max-requests, which has no KV cache manager: its seats bind)."""
    base = dict(
        max_num_seqs=64, num_gpu_blocks=600, max_model_len=1024, max_num_batched_tokens=1024, rate=40.0
    )
    if policy == "trtllm:max-requests":
        base["max_num_seqs"] = 16
    cfg = RunConfig(policy=policy, engine=engine, **{**base, **kw})
    return cfg, cap_tokens(load_workload("azure-conv-2023").iloc[:150], 1024)


@pytest.mark.parametrize("policy,engine", QUEUED)
def test_jumps_cover_steps_with_requests_waiting(policy: str, engine: str) -> None:
    """More steps are jumped than there are steps with nobody waiting: stretches run while the
    queue's head is short of blocks (SGLang: while the batch is full), and arrivals join the
    queue inside them."""
    cfg, wl = saturated(policy, engine)
    summary = assert_same(cfg, workload=wl)
    from schedsim import simulate

    steps = simulate(cfg, workload=wl).steps
    assert summary["fast_forward_steps"] > int((steps["num_waiting"] == 0).sum())
    assert (steps["num_waiting"] > 0).mean() > 0.5  # the configuration does queue


@pytest.mark.parametrize("policy,engine", QUEUED)
def test_queued_stretches_leave_identical_policy_state(
    policy: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, wl = saturated(policy, engine)
    assert assert_same_state_when_stopped(cfg, (1.1, 2.3), monkeypatch, workload=wl) > 0


@pytest.mark.parametrize("policy,engine", sorted(VLLM_JUMPING))
@pytest.mark.parametrize(
    "extra",
    [
        dict(scheduling_policy="priority"),
        dict(max_num_seqs=8),  # the seats bind: arrivals wait behind a full batch
        dict(
            policy_options={"long_prefill_token_threshold": 64, "long_prefill_token_threshold_adaptive": True}
        ),
        dict(enable_chunked_prefill=False),
        dict(abort_fraction=0.2, abort_window_s=2.0),
    ],
    ids=["priority", "seats", "adaptive-threshold", "no-chunking", "aborts"],
)
def test_saturated_options_identical(policy: str, engine: str, extra: dict) -> None:
    cfg, wl = saturated(policy, engine, **extra)
    assert assert_same(cfg, workload=wl)["fast_forward_steps"] > 0


def test_sglang_intake_aborts_inside_full_batch_stretches_identical() -> None:
    """A prompt too long for SGLang's intake is aborted on arrival and reported by the next
    update: with such arrivals in the trace, arrivals end the stretch (tables still equal)."""
    cfg, wl = saturated("sglang-overlap", "async")
    long = wl.iloc[10:40:3].assign(prompt_tokens=1020, output_tokens=4)  # >= max_req_input_len
    ids = [f"long{i}" for i in range(len(long))]
    long = long.assign(request_id=ids, arrival_time=long["arrival_time"] + 0.011)
    wl = pd.concat([wl, long]).sort_values("arrival_time", kind="stable").reset_index(drop=True)
    summary = assert_same(cfg, workload=wl)
    assert summary["fast_forward_steps"] > 0
    from schedsim import simulate

    reasons = simulate(cfg, workload=wl).requests.set_index("request_id")["finish_reason"]
    assert (reasons[long["request_id"]] == "abort").all()


@st.composite
def long_queues(draw: st.DrawFn) -> pd.DataFrame:
    """Over 128 requests at once, some sharing prompt blocks (their lookups split tree nodes)."""
    n = draw(st.integers(150, 220))
    own = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    shared = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    hashes = [
        tuple(range(s)) + tuple(10**6 + 10 * i + j for j in range(o))
        for i, (s, o) in enumerate(zip(shared, own, strict=True))
    ]
    wl = pd.DataFrame(
        {
            "request_id": [f"l{i}" for i in range(n)],
            "arrival_time": np.arange(n) * draw(st.sampled_from([0.0005, 0.002])),
            "prompt_tokens": [16 * len(h) - 3 for h in hashes],
            "output_tokens": draw(st.lists(st.integers(2, 60), min_size=n, max_size=n)),
            "prompt_block_hashes": hashes,
        }
    )
    wl.attrs[ATTR_PREFIX_BLOCK_SIZE] = 16
    return wl


@pytest.mark.parametrize("engine", ["sync", "async"])
@settings(parent=SETTINGS, max_examples=6)
@given(
    wl=long_queues(),
    blocks=st.integers(40, 90),
    seqs=st.sampled_from([8, 64]),
    options=st.sampled_from(
        [
            {},
            {"schedule_policy": "lpm"},
            {"enable_mixed_chunk": True},
            {"schedule_policy": "lpm", "enable_mixed_chunk": True},
        ]
    ),
)
def test_sglang_stretches_start_where_the_prefill_pass_refuses_the_head_identical(
    engine: str, wl: pd.DataFrame, blocks: int, seqs: int, options: dict
) -> None:
    """A queue of over 128 bound by KV: right after a request leaves the batch, the next prefill
    pass refuses the queue's head (NO_TOKEN) and marks the batch full; a stretch may start there,
    running that pass first (its lookup of the head stamps and splits the tree)."""
    assert_same(long_queue_config(engine, blocks, seqs, options), workload=wl, check_invariants=True)


def long_queue_config(engine: str, blocks: int, seqs: int, options: dict) -> RunConfig:
    """SGLang on a small pool with chunked prefill."""
    return RunConfig(
        policy="sglang-overlap",
        engine=engine,
        num_gpu_blocks=blocks,
        max_num_seqs=seqs,
        max_num_batched_tokens=256,
        max_model_len=512,
        block_size=16,
        latency_model="roofline",
        enable_chunked_prefill=True,
        policy_options=options,
    )


def test_sglang_takes_stretches_from_an_open_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Such stretches are taken (interpreted: a compiled class cannot be wrapped to see them)."""
    from schedsim import accel
    from schedsim.policies.sglang.fastforward import SGLangFastForward

    if accel.status().active:
        pytest.skip("the compiled companion cannot be wrapped")
    n = 200
    wl = pd.DataFrame(
        {
            "request_id": [f"l{i}" for i in range(n)],
            "arrival_time": np.arange(n) * 0.001,
            "prompt_tokens": [40 + 7 * (i % 9) for i in range(n)],
            "output_tokens": [20 + 11 * (i % 5) for i in range(n)],
        }
    )
    taken: list[bool] = []
    real = SGLangFastForward._prefill_fills_batch
    monkeypatch.setattr(
        SGLangFastForward, "_prefill_fills_batch", lambda ff: taken.append(real(ff)) or taken[-1]
    )
    summary = assert_same(long_queue_config("async", 60, 64, {}), workload=wl)
    assert any(taken) and summary["fast_forward_steps"] > 0


@pytest.mark.parametrize("policy,engine", sorted(VLLM_JUMPING))
def test_vllm_stretches_run_while_a_preempted_request_waits(
    policy: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recompute frontier held by a waiting (preempted) request does not stop a stretch: only a
    running request below its frontier counts recomputed tokens when scheduled (interpreted: a
    compiled class cannot be wrapped to see them)."""
    from schedsim import accel
    from schedsim.policies.vllm.fastforward import VllmFastForward

    if accel.status().active:
        pytest.skip("the compiled companion cannot be wrapped")
    held: list[int] = []  # frontiers held at each jump, none of them by a running request
    real = VllmFastForward.advance

    def advance(ff: VllmFastForward, reqs, k, tokens, skipped=()):  # type: ignore[no-untyped-def]
        frontier = ff.sched.recompute_frontier
        assert not any(r.request_id in frontier for r in reqs)
        held.append(len(frontier))
        return real(ff, reqs, k, tokens, skipped)

    monkeypatch.setattr(VllmFastForward, "advance", advance)
    cfg, wl = saturated(policy, engine)
    summary = assert_same(cfg, workload=wl)
    assert summary["num_preemptions"] > 0 and max(held) > 0


@pytest.mark.parametrize("reservation", ["max_tokens", "none"])
@pytest.mark.parametrize("seqs", [8, 64])
def test_orca_reservations_identical(reservation: str, seqs: int) -> None:
    """orca asks for the whole prompt, plus every output's slot when it reserves to completion."""
    cfg, wl = saturated("orca", "sync", max_num_seqs=seqs, policy_options={"kv_reservation": reservation})
    assert assert_same(cfg, workload=wl)["fast_forward_steps"] > 0


@pytest.mark.parametrize("policy", ["trtllm:guaranteed-no-evict", "trtllm:max-utilization"])
def test_trtllm_refused_prompt_inside_a_queued_stretch_identical(policy: str) -> None:
    """`long` (over max_input_len) and `late` arrive while `head` waits for blocks behind `gen`:
    the jump takes both at their polls, refusing `long` as the engine does."""
    wl = pd.DataFrame(
        {
            "request_id": ["gen", "head", "long", "late"],
            "arrival_time": [0.0, 0.01, 0.05, 0.06],
            "prompt_tokens": [160, 400, 600, 30],
            "output_tokens": [300, 20, 5, 5],
        }
    )
    cfg = RunConfig(
        policy=policy,
        num_gpu_blocks=40,
        block_size=16,
        max_model_len=512,
        max_num_seqs=8,
        latency_model="roofline",
    )
    summary = assert_same(cfg, workload=wl, check_invariants=True)
    assert summary["num_rejected"] == 1
    assert summary["fast_forward_steps"] > summary["num_steps"] * 0.9


def test_a_waiting_heads_hit_may_grow_only_through_shared_blocks() -> None:
    """`_hits_cannot_grow`: a head whose next block is a content block a running request may still
    publish (token ids: never private) can have its hit grown; a head whose next block is its own
    (a prompt known only by its length) cannot, whatever runs."""
    policy = make_policy("vllm", block_size=16, max_model_len=256, num_gpu_blocks=64)
    running = Request("running", 0.0, 32, 8, prompt_token_ids=list(range(3, 35)))
    policy.add_request(running)
    policy.schedule()  # its prompt's two blocks published
    ff = policy.fast_forward()
    shared = Request("shared", 1.0, 48, 8, prompt_token_ids=list(range(3, 35)) + [7] * 16)
    hit, _ = policy.kv.get_computed_blocks(shared)
    assert len(hit) == 2
    # block 2 of `running` (its outputs) is unpublished and may match the head's block 2
    assert not ff._hits_cannot_grow(shared, 2, [running])
    assert ff._hits_cannot_grow(shared, 1, [running])  # its blocks up to the hit's end are published
    private = Request("private", 1.0, 48, 8)
    for h in range(3):  # (a hit on a private head's blocks is its own, kept from before a preemption)
        assert ff._hits_cannot_grow(private, h, [running])
