"""Request lifecycle of the vLLM policies: arrival, abort, preemption, freeing, invariants."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mypy_extensions import trait

from ..request import Request, RequestStatus
from .state import VllmState


@trait
class LifecycleMixin(VllmState):
    """Queues and KV bookkeeping around schedule()/update_from_output (vLLM's Scheduler helpers)."""

    def add_request(self, request: Request) -> None:
        """Queue a new arrival (status WAITING)."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Finish live requests as aborted (vLLM's finish_requests); their outputs are dropped."""
        valid: list[Request] = []
        seen: set[str] = set()
        for rid in request_ids:
            request = self.requests.get(rid)
            if request is None or request.is_finished or rid in seen:
                continue
            seen.add(rid)
            valid.append(request)
        if not valid:
            return valid
        in_running = {r for r in valid if r.status == RequestStatus.RUNNING}
        if in_running:
            self.running = [r for r in self.running if r not in in_running]
        in_waiting = {r for r in valid if r not in in_running}
        if in_waiting:
            self.waiting.remove_many(in_waiting)
        for request in valid:
            request.status = RequestStatus.FINISHED_ABORTED
            self._free_request(request)
        return valid

    def has_unfinished_requests(self) -> bool:
        """Requests still waiting or running."""
        return bool(self.running) or len(self.waiting) > 0

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported in a plan."""
        return self.has_unfinished_requests() or bool(self.finished_req_ids)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting)."""
        return len(self.running), len(self.waiting)

    def kv_usage(self) -> float:
        """Fraction of usable KV blocks in use."""
        return self.kv.usage

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Drafts proposed after a step; ignored for prefill chunks (they sampled nothing)."""
        for rid, tokens in drafts.items():
            request = self.requests.get(rid)
            if request is None or request.is_finished:
                continue
            if request.is_prefill_chunk:
                if request.spec_token_ids:
                    request.spec_token_ids = []
                continue
            request.spec_token_ids = list(tokens)

    def _blocks_can_be_freed(self, request: Request) -> bool:
        """Under deferred free, a victim still being written by an in-flight step cannot help now."""
        return not self.config.defer_block_free or self.kv.can_free_now(request.last_sched_seq)

    def _free_blocks(self, request: Request) -> None:
        """Free now, or park behind the fence of the newest scheduled step."""
        if self.config.defer_block_free:
            self.kv.free(request, request.last_sched_seq)
        else:
            self.kv.free(request)

    def _preempt(self, request: Request) -> None:
        """Recompute preemption: drop KV, mark in-flight output stale, back to the front of waiting."""
        assert request.status == RequestStatus.RUNNING, "only running requests can be preempted"
        self.recompute_frontier[request.request_id] = max(
            request.num_computed_tokens, self.recompute_frontier.get(request.request_id, 0))
        self._free_blocks(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        if request.spec_token_ids:
            request.spec_token_ids = []
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.waiting.prepend(request)
        self.preempted_req_ids.append(request.request_id)

    def _free_request(self, request: Request) -> None:
        """A finished request: report it in the next plan, release blocks, forget it."""
        rid = request.request_id
        self.finished_req_ids.append(rid)
        self._free_blocks(request)
        self.kv.drop_request(request)
        self.recompute_frontier.pop(rid, None)
        del self.requests[rid]

    def check_invariants(self) -> None:
        """KV blocks conserved, queues consistent, placeholders and in-flight counts >= 0."""
        self.kv.check_invariants()
        running = set(map(id, self.running))
        waiting = set(map(id, self.waiting))
        assert len(running) == len(self.running), "duplicate in running"
        assert not running & waiting, "request both running and waiting"
        assert len(running) + len(waiting) == len(self.requests), "queues do not cover the requests"
        for request in self.requests.values():
            assert not request.is_finished, f"{request.request_id}: finished but still tracked"
            assert request.num_output_placeholders >= 0, f"{request.request_id}: placeholders < 0"
            assert request.num_in_flight_tokens >= 0, f"{request.request_id}: in-flight < 0"
            assert request.num_stale_output_tokens >= 0, f"{request.request_id}: stale < 0"
            assert request.safe_frontier >= 0, f"{request.request_id}: safe frontier < 0"
            if request.status == RequestStatus.RUNNING:
                assert id(request) in running, f"{request.request_id}: RUNNING but not in running"
            else:
                assert request.num_computed_tokens == 0, f"{request.request_id}: waiting with KV"
                assert not self.kv.get_block_ids(request.request_id), f"{request.request_id}: blocks"
