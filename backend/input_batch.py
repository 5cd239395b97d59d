"""Host-side input preparation: turn a StepPlan into flat token rows, slots, tables and sample rows.

The executor keeps, per live request, the tokens it sampled that the scheduler has not seen yet
(async placeholders). A position whose token is such a placeholder gets -1 here and a fill entry:
the device copies the previous step's sampled token into that row, so the host never waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schedsim.policies.plan import StepPlan
from schedsim.policies.request import Request

from .kv_cache import PagedKVCache


@dataclass
class PendingToken:
    """A sampled token still on the device: row `row` of step `handle`'s sampled tensor."""

    handle: Any  # StepHandle (kept untyped to avoid an import cycle)
    row: int


@dataclass
class RequestState:
    """The executor's view of one live request (dropped on finish, preemption or pause)."""

    request_id: str
    next_pos: int  # tokens in the sequence as the executor knows it, placeholders included
    pending: dict[int, PendingToken] = field(default_factory=dict)

    def sync(self, request: Request) -> None:
        """Forget placeholders the scheduler has resolved (their tokens are in the request now)."""
        known = request.num_tokens
        self.next_pos = max(self.next_pos, known)
        for pos in [p for p in self.pending if p < known]:
            del self.pending[pos]


@dataclass
class HostBatch:
    """One step's inputs on the host, in the plan's request order."""

    req_ids: list[str] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)  # -1 where the device fills a placeholder
    positions: list[int] = field(default_factory=list)
    slot_mapping: list[int] = field(default_factory=list)
    query_start_loc: list[int] = field(default_factory=lambda: [0])
    seq_lens: list[int] = field(default_factory=list)
    block_tables: list[list[int]] = field(default_factory=list)
    fills: list[tuple[int, PendingToken]] = field(default_factory=list)  # (flat row, source)
    sample_rows: list[int] = field(default_factory=list)
    sample_req_ids: list[str] = field(default_factory=list)
    sample_positions: list[int] = field(default_factory=list)  # position of the token drawn
    block_copies: list[tuple[int, int]] = field(default_factory=list)  # (source, destination) before the step

    @property
    def num_tokens(self) -> int:
        """Flat rows in the batch."""
        return len(self.input_ids)


def _token_at(request: Request, state: RequestState, pos: int) -> int | PendingToken:
    """The input token at a position: known to the scheduler, already copied back, or on device."""
    if pos < request.num_tokens:
        tok = request.token_id_at(pos)
        assert tok is not None  # prompt_token_ids checked by the caller
        return tok
    pending = state.pending.get(pos)
    if pending is None:
        raise ValueError(
            f"request {request.request_id}: position {pos} is neither known "
            f"({request.num_tokens} tokens) nor a placeholder of this executor"
        )
    tokens = pending.handle.tokens
    return pending if tokens is None else tokens[pending.row]


@dataclass(frozen=True)
class ModelLimits:
    """What the model can take: token ids below vocab_size, positions below max_positions."""

    vocab_size: int
    max_positions: int


def _new_state(request: Request, limits: ModelLimits) -> RequestState:
    """State for a new or resumed request, once its prompt ids are known to fit the vocabulary
    (an out-of-range id is a device-side assert on CUDA, which kills the process's context)."""
    ids = request.prompt_token_ids or []
    bad = [t for t in ids if not 0 <= t < limits.vocab_size]
    if bad:
        raise ValueError(
            f"request {request.request_id}: prompt token ids {bad[:4]} outside the model's "
            f"vocabulary 0..{limits.vocab_size - 1}"
        )
    return RequestState(request.request_id, request.num_tokens)


def _check_request(plan: StepPlan, rid: str, requests: Mapping[str, Request]) -> Request:
    """The scheduled request, or a clear error about what the real backend cannot run."""
    request = requests.get(rid)
    if request is None:
        raise ValueError(f"step {plan.step_id}: scheduled request {rid!r} missing from `requests`")
    if request.prompt_token_ids is None:
        raise ValueError(f"request {rid}: the real backend needs prompt_token_ids (got only prompt_len)")
    if plan.spec_decode_tokens.get(rid):
        raise ValueError(
            f"request {rid}: speculative decoding is not supported by the real backend (it has no drafter)"
        )
    if rid not in plan.context_lens or rid not in plan.block_ids:
        raise ValueError(f"step {plan.step_id}: plan lacks context_lens/block_ids for request {rid!r}")
    return request


def prepare_batch(
    plan: StepPlan,
    requests: Mapping[str, Request],
    states: dict[str, RequestState],
    cache: PagedKVCache,
    limits: ModelLimits,
) -> HostBatch:
    """Build the host batch; registers a new placeholder for every request that samples."""
    batch = HostBatch(block_copies=list(plan.kv_block_copies))
    for rid, n in plan.num_scheduled_tokens.items():
        if n <= 0:
            continue
        request = _check_request(plan, rid, requests)
        state = states.get(rid)
        if state is None or rid in plan.new_req_ids or rid in plan.resumed_req_ids:
            state = states[rid] = _new_state(request, limits)
        state.sync(request)
        start, end = plan.context_lens[rid], plan.context_lens[rid] + n
        if end > state.next_pos:
            raise ValueError(
                f"request {rid}: step {plan.step_id} computes up to position {end - 1} but only "
                f"{state.next_pos} tokens exist (context {start}, {n} scheduled)"
            )
        if end > limits.max_positions:
            raise ValueError(
                f"request {rid}: position {end - 1} is beyond the model's "
                f"max_position_embeddings {limits.max_positions}"
            )
        table = list(plan.block_ids[rid])
        cache.check_table(rid, table, end)
        for pos in range(start, end):
            tok = _token_at(request, state, pos)
            if isinstance(tok, PendingToken):
                batch.fills.append((len(batch.input_ids), tok))
                tok = -1
            batch.input_ids.append(tok)
        batch.positions += range(start, end)
        batch.slot_mapping += cache.slots(table, start, end)
        batch.query_start_loc.append(len(batch.input_ids))
        batch.seq_lens.append(end)
        batch.block_tables.append(table)
        batch.req_ids.append(rid)
        if end == state.next_pos:  # reaches the last known token: this step draws the next one
            batch.sample_rows.append(len(batch.input_ids) - 1)
            batch.sample_req_ids.append(rid)
            batch.sample_positions.append(end)
    return batch


def register_placeholders(batch: HostBatch, states: dict[str, RequestState], handle: Any) -> None:
    """Record the tokens this step will sample as placeholders at each request's next position."""
    for row, (rid, pos) in enumerate(zip(batch.sample_req_ids, batch.sample_positions, strict=True)):
        state = states[rid]
        state.pending[pos] = PendingToken(handle, row)
        state.next_pos = pos + 1
