"""Bookkeeping invariants of the TensorRT-LLM policy (tests and the simulator's checks call them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .state import CAPACITY_WINDOW, LlmRequest, LlmRequestState

if TYPE_CHECKING:
    from .policy import TrtllmPolicy


def _check_disagg_generation(policy: TrtllmPolicy, req: LlmRequest) -> bool:
    """A generation-only request before it generates: no blocks, then its prompt's, then all computed.

    Returns whether the request was in one of those states (checked here, not as a colocated one).
    """
    request, rid = req.request, req.request_id
    kv, tc = policy.kv, policy.transceiver
    state = req.state
    if state == LlmRequestState.DISAGG_GENERATION_INIT:
        assert not kv.has_sequence(rid), f"{rid}: DISAGG_GENERATION_INIT holds blocks"
        assert request.num_computed_tokens == 0 and not request.output_token_ids, (
            f"{rid}: computed before init"
        )
        return True
    if state == LlmRequestState.DISAGG_GENERATION_TRANS_IN_PROGRESS:
        assert rid in tc.receiving, f"{rid}: receiving but not tracked by the transceiver"
        assert kv.num_tokens(rid) == req.prompt_len, f"{rid}: receive into {kv.num_tokens(rid)} tokens"
        assert request.num_computed_tokens == req.prepopulated_prompt_len, f"{rid}: computed while receiving"
        return True
    if state == LlmRequestState.DISAGG_GENERATION_TRANS_COMPLETE:
        assert rid in tc.complete, f"{rid}: received but not tracked by the transceiver"
        assert kv.num_tokens(rid) == req.prompt_len == request.num_computed_tokens, f"{rid}: partial KV"
        assert not request.output_token_ids, f"{rid}: first token appended before generating"
        return True
    return False


def _check_request(policy: TrtllmPolicy, req: LlmRequest) -> None:
    """One active request: window, folded prompt, cursor, and a sequence sized for its tokens."""
    request, rid = req.request, req.request_id
    kv = policy.kv
    assert not request.is_finished, f"{rid}: finished request still active"
    if req.is_generation_only_request and _check_disagg_generation(policy, req):
        return
    assert CAPACITY_WINDOW.admits(req.state), f"{rid}: live request in state {req.state.name}"
    assert not request.is_finished, f"{rid}: finished request still active"
    assert req.max_new_tokens >= 1, f"{rid}: max_new_tokens {req.max_new_tokens} < 1"
    if req.beam_width == 1:
        assert req.prompt_len + req.max_new_tokens == request.prompt_len + min(
            request.max_tokens, policy.config.max_model_len - request.prompt_len
        ), f"{rid}: folding changed prompt + max_new_tokens"
    in_flight = rid in policy.inflight
    assert (req.scheduled_tokens > 0) == in_flight, (
        f"{rid}: {req.scheduled_tokens} scheduled tokens, in flight: {in_flight}"
    )
    if req.is_context_init_state:
        assert request.num_tokens == req.prompt_len, f"{rid}: context request with unfolded outputs"
        assert 0 <= req.context_current_position <= req.prompt_len, f"{rid}: cursor out of range"
        if not in_flight:
            assert request.num_computed_tokens == req.context_current_position, (
                f"{rid}: num_computed_tokens {request.num_computed_tokens} != cursor"
            )
            if req.is_first_context_chunk:
                assert not kv.has_sequence(rid), f"{rid}: first-chunk context holds blocks before running"
        if not req.is_first_context_chunk:
            assert kv.num_tokens(rid) >= req.prompt_len, f"{rid}: started context without its whole prompt"
    else:
        if not in_flight:
            assert request.num_computed_tokens == request.num_tokens - 1, (
                f"{rid}: generation request computed {request.num_computed_tokens} of {request.num_tokens}"
            )
            assert kv.num_tokens(rid) == request.num_computed_tokens, (
                f"{rid}: sequence of {kv.num_tokens(rid)} tokens, {request.num_computed_tokens} computed"
            )


def check_policy_invariants(policy: TrtllmPolicy) -> None:
    """Pool conservation, one sequence per started request, and every active request's own invariants."""
    policy.kv.check_invariants()
    live = {r.request_id for r in policy.active} | {r.request_id for r in policy.waiting}
    assert live == set(policy.requests), "active list, executor queue and request map disagree"
    assert len(live) == len(policy.active) + len(policy.waiting), "a request is queued twice"
    assert len(policy.active) <= policy.max_num_active_requests, "more active requests than the cap"
    started = sum(1 for r in policy.active if r.has_run)
    assert policy.num_started == started, f"num_started {policy.num_started}, {started} active have run"
    tc = policy.transceiver
    in_transit = set(tc.sending) | set(tc.release_after_transfer)
    stray = set(policy.kv.sequences) - live - set(policy.release_after_step) - in_transit
    assert not stray, f"blocks held by finished or unknown requests: {sorted(stray)}"
    for rid in in_transit:
        assert policy.kv.has_sequence(rid), f"{rid}: a transfer uses blocks the request no longer holds"
        assert rid not in live, f"{rid}: finished request in transit is still live"
    for rid, req in tc.sending.items():
        assert req.state == LlmRequestState.DISAGG_CONTEXT_TRANS_IN_PROGRESS, f"{rid}: sending in {req.state}"
    assert set(tc.receiving) <= live and set(tc.complete) <= live, "transceiver tracks dead requests"
    assert set(policy.inflight) <= live, "in-flight ids include dead requests"
    for req in policy.waiting:
        assert not policy.kv.has_sequence(req.request_id), f"{req.request_id}: queued request holds blocks"
    for req in policy.active:
        _check_request(policy, req)
    cap = policy.last_capacity
    if cap is not None:
        fitting, paused = {r.request_id for r in cap.fitting}, {r.request_id for r in cap.paused}
        assert not fitting & paused, f"requests both fitting and paused: {sorted(fitting & paused)}"
        assert len(fitting) <= policy.config.effective_max_batch_size, "more fitting requests than the cap"
