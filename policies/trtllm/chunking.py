"""Context chunking (setCtxRequestsChunkSize): how the micro-batch scheduler splits its token budget."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from .state import LlmRequest


class ChunkingPolicy(Enum):
    """The three kContextChunkingPolicy values, by their user-facing names."""

    EQUAL_PROGRESS = "equal-progress"
    FIRST_COME_FIRST_SERVED = "first-come-first-served"
    FORCE_CHUNK = "force-chunk"


def reuse_adjusted_compute(chunk_size: int, reusable: int, context_remaining: int) -> int:
    """Forward-pass tokens of a chunk: reuse shifts a non-last chunk's window, so only the last is cheaper."""
    if reusable <= 0 or reusable + chunk_size < context_remaining:
        return chunk_size
    return max(0, context_remaining - reusable)


def reusable_tokens(req: LlmRequest) -> int:
    """The prefix-reuse credit: only a first chunk has one, never more than what remains."""
    if not req.is_first_context_chunk:
        return 0
    return min(req.estimated_reusable_tokens, req.context_remaining_length)


def chunk_compute(req: LlmRequest, chunk_size: int | None = None) -> int:
    """Compute cost of `chunk_size` (default: the request's current chunk) at its cursor."""
    size = req.context_chunk_size if chunk_size is None else chunk_size
    return reuse_adjusted_compute(size, reusable_tokens(req), req.context_remaining_length)


def next_snapshot_chunk(req: LlmRequest) -> int:
    """Distance to the next expected snapshot point after the cursor, else the whole remainder."""
    pos = req.context_current_position
    later = [p for p in req.expected_snapshot_points if p > pos]
    if not later:
        return req.context_remaining_length
    return max(0, min(min(later), req.prompt_len) - pos)


def _equal_progress(
    reqs: Sequence[LlmRequest], capacity: int | None, unit: int, max_context_length: int | None
) -> None:
    """Lock-step rounds of +unit each; a round that makes no raw progress ends the loop."""
    total = 0
    progressed = 1
    while (capacity is None or total < capacity) and progressed > 0:
        progressed = 0
        for req in reqs:
            past = req.context_chunk_size
            req.set_context_chunk_size(past + unit)
            actual = req.context_chunk_size
            increment = chunk_compute(req, actual) - chunk_compute(req, past)
            over_budget = capacity is not None and total + increment > capacity
            if over_budget or (max_context_length is not None and actual > max_context_length):
                req.context_chunk_size = past
                continue
            total += increment
            # raw progress, not compute: a fully reusable increment still counts as progress
            progressed += actual - past


def _first_come_first_served(
    reqs: Sequence[LlmRequest], capacity: int | None, unit: int, max_context_length: int | None
) -> None:
    """In order, each request takes all it can; a trimmed chunk is floored to the chunk unit."""
    left = capacity
    for req in reqs:
        suggested = req.context_remaining_length
        reusable = reusable_tokens(req)
        actual = suggested
        if left is not None and reuse_adjusted_compute(suggested, reusable, suggested) > left:
            actual = max(left, 0)
        if (
            max_context_length is not None
            and reuse_adjusted_compute(actual, reusable, suggested) > max_context_length
        ):
            actual = min(max_context_length, suggested)
        if actual < suggested:
            actual = actual // unit * unit
        req.set_context_chunk_size(actual)
        if left is not None:
            left -= reuse_adjusted_compute(req.context_chunk_size, reusable, suggested)


def _force_chunk(
    reqs: Sequence[LlmRequest], capacity: int | None, unit: int, max_context_length: int | None
) -> None:
    """Chunks end at the next state-snapshot point (linear attention); no reuse credit applies."""
    if max_context_length is not None and max_context_length < unit:
        raise ValueError(
            f"force-chunk: chunk unit {unit} exceeds the max context length {max_context_length}"
        )
    total = 0
    for req in reqs:
        chunk = next_snapshot_chunk(req)
        if max_context_length is not None and chunk > max_context_length:
            chunk = max_context_length // unit * unit
        if capacity is not None and total + chunk > capacity:
            chunk = min(chunk, max(0, capacity - total)) // unit * unit
        req.set_context_chunk_size(chunk)
        total += req.context_chunk_size


_POLICIES = {
    ChunkingPolicy.EQUAL_PROGRESS: _equal_progress,
    ChunkingPolicy.FIRST_COME_FIRST_SERVED: _first_come_first_served,
    ChunkingPolicy.FORCE_CHUNK: _force_chunk,
}


def fit_draft_tokens(
    reqs: Sequence[LlmRequest], capacity: int | None, unit: int, max_context_length: int | None
) -> None:
    """Drafts ride on a last chunk only inside its last, partly filled chunk unit (no extra block)."""
    used = sum(chunk_compute(req) for req in reqs)
    for req in reqs:
        if not (req.is_last_context_chunk and req.has_draft_tokens()):
            continue
        remainder = req.context_chunk_size % unit
        room = 0 if remainder == 0 else unit - remainder
        if max_context_length is not None:
            room = min(room, max_context_length - req.context_chunk_size)
        kept = min(req.num_draft_tokens, max(0, room))
        if capacity is not None:
            kept = max(0, min(kept, capacity - used))
            used += kept
        req.discard_draft_tokens(req.num_draft_tokens - kept)


def set_ctx_requests_chunk_size(
    reqs: Sequence[LlmRequest],
    policy: ChunkingPolicy,
    capacity: int | None,
    unit: int,
    max_context_length: int | None,
) -> None:
    """Reset every chunk to 0, let the policy hand out the budget, then trim the drafts."""
    if unit < 1:
        raise ValueError(f"chunk unit must be >= 1, got {unit}")
    for req in reqs:
        req.context_chunk_size = 0
    _POLICIES[policy](reqs, capacity, unit, max_context_length)
    fit_draft_tokens(reqs, capacity, unit, max_context_length)
