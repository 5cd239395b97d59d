"""Scenario tests for the micro-batch scheduler and chunking policies: exact selections and chunk sizes."""

from __future__ import annotations

import pytest
from schedsim.policies.trtllm import (
    ChunkingPolicy,
    ContextChunkingConfig,
    MicroBatchScheduler,
    reuse_adjusted_compute,
    set_ctx_requests_chunk_size,
)
from support.trtllm import ctx, gen, ids

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

EP = ChunkingPolicy.EQUAL_PROGRESS
FCFS = ChunkingPolicy.FIRST_COME_FIRST_SERVED
FORCE = ChunkingPolicy.FORCE_CHUNK


def scheduler(
    max_batch: int = 8, max_tokens: int | None = None, policy: ChunkingPolicy | None = None, unit: int = 64
) -> MicroBatchScheduler:
    cfg = None if policy is None else ContextChunkingConfig(policy, unit)
    return MicroBatchScheduler(max_batch, max_tokens, cfg)


def test_max_batch_size_caps_the_batch():
    g = [gen(f"g{i}") for i in range(3)]
    assert ids(scheduler(max_batch=2).schedule(g, set()).generation_requests) == ["g0", "g1"]


def test_token_budget_breaks_on_first_generation_that_does_not_fit():
    g = [gen(f"g{i}", drafts=2) for i in range(3)]  # each costs 1 + 2 drafts
    batch = scheduler(max_tokens=3).schedule(g, set())
    assert ids(batch.generation_requests) == ["g0"]
    assert batch.num_compute_tokens == 3


def test_beam_width_consistency_skips_mismatching_generations():
    g = [gen("g0", beam=2), gen("g1", beam=1), gen("g2", beam=2)]
    batch = scheduler().schedule(g, set())
    assert ids(batch.generation_requests) == ["g0", "g2"]
    assert batch.num_compute_tokens == 4  # generation cost = beam width + drafts


def test_in_flight_requests_are_skipped_without_counting():
    g = [gen("g0"), gen("g1"), gen("g2")]
    assert ids(scheduler(max_batch=2).schedule(g, {"g0"}).generation_requests) == ["g1", "g2"]


def test_equal_progress_rounds():
    a, b = ctx("A", 300), ctx("B", 100)
    batch = scheduler(max_tokens=256, policy=EP, unit=64).schedule([a, b], set())
    assert (a.context_chunk_size, b.context_chunk_size) == (128, 100)
    assert ids(batch.context_requests) == ["A", "B"]  # A mid-chunk first, B's last chunk at the end
    assert batch.num_compute_tokens == 228


def test_fcfs_floors_a_trimmed_chunk_to_the_unit():
    a, b = ctx("A", 150), ctx("B", 120)
    batch = scheduler(max_tokens=200, policy=FCFS, unit=64).schedule([a, b], set())
    assert ids(batch.context_requests) == ["A"]
    assert (a.context_chunk_size, b.context_chunk_size) == (150, 0)


def test_generations_are_charged_before_contexts_get_the_rest():
    g, a = gen("g"), ctx("A", 300)
    batch = scheduler(max_tokens=129, policy=FCFS, unit=64).schedule([a, g], set())
    assert a.context_chunk_size == 128  # 128 left after the decode, floored to 2 units
    assert ids(batch.context_requests) == ["A"] and ids(batch.generation_requests) == ["g"]


def test_all_contexts_fit_so_no_chunking_happens():
    a, b = ctx("A", 100), ctx("B", 50)
    scheduler(max_tokens=1000, policy=EP, unit=64).schedule([a, b], set())
    assert (a.context_chunk_size, b.context_chunk_size) == (100, 50)


def test_without_chunking_a_context_that_does_not_fit_breaks():
    a, b, c = ctx("A", 60), ctx("B", 50), ctx("C", 10)
    batch = scheduler(max_tokens=100).schedule([a, b, c], set())
    assert ids(batch.context_requests) == ["A"]  # B breaks the loop: C is never considered


def test_without_chunking_an_oversized_context_is_an_error():
    with pytest.raises(ValueError, match="exceeds max_num_tokens"):
        scheduler(max_tokens=100).schedule([ctx("A", 101)], set())


def test_force_chunk_cuts_at_the_next_snapshot_point_even_when_all_fit():
    a = ctx("A", 300, pos=64)
    a.expected_snapshot_points = (64, 160, 256)
    scheduler(max_tokens=4096, policy=FORCE, unit=32).schedule([a], set())
    assert a.context_chunk_size == 96
    b = ctx("B", 300)
    b.expected_snapshot_points = (200,)
    scheduler(max_tokens=100, policy=FORCE, unit=32).schedule([b], set())
    assert b.context_chunk_size == 96  # capacity 100 floored to the unit


def test_fit_draft_tokens_keeps_only_what_fits_in_the_last_unit():
    a = ctx("A", 100, drafts=5)
    set_ctx_requests_chunk_size([a], FCFS, None, 64, None)
    assert a.context_chunk_size == 100 and a.num_draft_tokens == 5  # room 64 - 100 % 64 = 28
    b = ctx("B", 128, drafts=5)
    set_ctx_requests_chunk_size([b], FCFS, None, 64, None)
    assert b.num_draft_tokens == 0  # aligned chunk: drafts would need a new block


def test_ordering_last_chunks_at_the_end_then_by_lora_id():
    a, b, c = ctx("A", 100), ctx("B", 500), ctx("C", 50)
    batch = scheduler(max_tokens=400, policy=EP, unit=50).schedule([a, b, c], set())
    assert (a.context_chunk_size, b.context_chunk_size, c.context_chunk_size) == (100, 250, 50)
    assert ids(batch.context_requests) == ["B", "A", "C"]
    loras = [gen("x", lora=3), gen("y"), gen("z", lora=1)]
    assert ids(scheduler().schedule(loras, set()).generation_requests) == ["y", "z", "x"]


def test_reuse_adjusted_compute_discounts_only_the_last_chunk():
    assert reuse_adjusted_compute(512, 800, 1000) == 200
    assert reuse_adjusted_compute(100, 800, 1000) == 100
    assert reuse_adjusted_compute(512, 0, 1000) == 512


def test_fully_cached_prompt_still_costs_one_token():
    a = ctx("A", 64, reusable=64)
    batch = scheduler(max_tokens=1).schedule([a], set())
    assert ids(batch.context_requests) == ["A"] and batch.num_compute_tokens == 1


def test_reuse_credit_lets_fcfs_take_the_whole_prompt():
    a = ctx("A", 1000, reusable=800)
    scheduler(max_tokens=256, policy=FCFS, unit=64).schedule([a, ctx("B", 300)], set())
    assert a.context_chunk_size == 1000  # compute 200 <= 256
