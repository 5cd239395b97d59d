"""Level 1, the capacity scheduler: who may hold KV and run at all this step, and whom to pause."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import Enum

from .kv_accounting import KvAccounting, MaxUtilizationScheduledBlocks, NoEvictScheduledBlocks
from .kv_cache_manager import PrefixReuseSummary
from .prefix_aware import PrefixSkipper
from .state import LlmRequest


class CapacitySchedulerPolicy(Enum):
    """CapacitySchedulerPolicy plus the no-KV-manager fallback, by user-facing names."""

    MAX_REQUESTS = "max-requests"
    GUARANTEED_NO_EVICT = "guaranteed-no-evict"
    STATIC_BATCH = "static-batch"
    MAX_UTILIZATION = "max-utilization"


@dataclass(frozen=True, slots=True)
class PeftBudget:
    """LoRA adapter pages: each adapter new to this round claims its pages once (uniqTaskIds)."""

    max_pages: int
    pages_per_adapter: int

    def __post_init__(self) -> None:
        """Negative budgets are meaningless."""
        if self.max_pages < 0 or self.pages_per_adapter < 0:
            raise ValueError(
                f"PeftBudget: max_pages ({self.max_pages}) and pages_per_adapter "
                f"({self.pages_per_adapter}) must be >= 0"
            )


class _PeftRound:
    """Pages claimed so far this round."""

    def __init__(self, budget: PeftBudget | None) -> None:
        self.budget = budget
        self.claimed = 0
        self.seen: set[int] = set()

    def needed(self, req: LlmRequest) -> int:
        """Pages this request would add (0 without LoRA or for an adapter already claimed)."""
        tid = req.lora_task_id
        if self.budget is None or tid is None or tid in self.seen:
            return 0
        return self.budget.pages_per_adapter

    def fits(self, req: LlmRequest) -> bool:
        """Would its adapter's pages fit."""
        return self.budget is None or self.claimed + self.needed(req) <= self.budget.max_pages

    def claim(self, req: LlmRequest) -> None:
        """Commit the request's adapter pages."""
        self.claimed += self.needed(req)
        if req.lora_task_id is not None:
            self.seen.add(req.lora_task_id)


class CapacityResult:
    """(fitting, fitting disagg-gen-init, paused) plus how many first chunks prefix-aware skipping deferred.

    `fitting_disagg_gen_init`: generation-only requests admitted in DISAGG_GENERATION_INIT; the
    executor allocates their blocks and starts their KV transfer instead of running them.
    """

    def __init__(
        self, fitting: list[LlmRequest], paused: list[LlmRequest], num_prefix_skipped: int = 0
    ) -> None:
        self.fitting, self.paused, self.num_prefix_skipped = fitting, paused, num_prefix_skipped
        self.fitting_disagg_gen_init: list[LlmRequest] = []

    def classify(self) -> CapacityResult:
        """_classify_output: move the admitted DISAGG_GENERATION_INIT requests out of `fitting`."""
        if any(r.is_disagg_generation_init_state for r in self.fitting):
            self.fitting_disagg_gen_init = [r for r in self.fitting if r.is_disagg_generation_init_state]
            self.fitting = [r for r in self.fitting if not r.is_disagg_generation_init_state]
        return self


def schedulable_with_disagg_exception(req: LlmRequest) -> bool:
    """The KV-aware policies also consider DISAGG_GENERATION_INIT, below the capacity window."""
    return req.in_capacity_window or req.is_disagg_generation_init_state


class CapacityScheduler:
    """PyCapacityScheduler: one policy; no KV accounting means max-requests, as in TensorRT-LLM."""

    def __init__(
        self,
        policy: CapacitySchedulerPolicy,
        max_num_requests: int,
        acct: KvAccounting | None,
        *,
        two_steps_look_ahead: bool = False,
        prefix_aware: bool = True,
        variable_window: bool = False,
        peft: PeftBudget | None = None,
        started_contexts_in_first_pass: bool = False,
    ) -> None:
        """Validate the count cap; prefix awareness needs a fixed attention window.

        `started_contexts_in_first_pass` (not TensorRT-LLM): no-evict and static batch schedule a
        context past its first chunk in the first pass, with the generations, so a new context that
        misses on blocks ahead of it cannot hold it back.
        """
        if max_num_requests < 1:
            raise ValueError(f"CapacityScheduler.max_num_requests must be >= 1, got {max_num_requests}")
        self.policy = policy if acct is not None else CapacitySchedulerPolicy.MAX_REQUESTS
        self.max_num_requests = max_num_requests
        self.acct = acct
        self.two_steps = two_steps_look_ahead
        self.prefix_aware = prefix_aware and not variable_window
        self.peft = peft
        self.started_contexts_in_first_pass = started_contexts_in_first_pass

    def schedule(self, active: Sequence[LlmRequest], inflight: Collection[str] = ()) -> CapacityResult:
        """Run the configured policy over the active requests in their order.

        `inflight`: requests in a micro-batch still on the device; max-utilization never pauses them
        (their KV is being written), which only matters with more than one micro-batch in flight.
        """
        if self.policy is CapacitySchedulerPolicy.MAX_REQUESTS:
            return self._max_requests(active)
        if self.policy is CapacitySchedulerPolicy.MAX_UTILIZATION:
            return self._max_utilization(active, inflight).classify()
        return self._guaranteed_no_evict(
            active, self.policy is CapacitySchedulerPolicy.STATIC_BATCH
        ).classify()

    def _max_requests(self, active: Sequence[LlmRequest]) -> CapacityResult:
        """Count cap only; never pauses, never looks at KV (nor at DISAGG_GENERATION_INIT)."""
        fitting: list[LlmRequest] = []
        for req in active:
            if not req.in_capacity_window:
                continue
            if len(fitting) >= self.max_num_requests:
                break
            if req.is_context_init_state or req.is_generation_in_progress_state:
                fitting.append(req)
        return CapacityResult(fitting, [])

    def _first_pass(self, req: LlmRequest) -> bool:
        """Scheduled unconditionally in no-evict's first pass: generations (opted in: started contexts)."""
        return req.is_generation_in_progress_state or (
            self.started_contexts_in_first_pass and self._is_started(req)
        )

    def _guaranteed_no_evict(self, active: Sequence[LlmRequest], static: bool) -> CapacityResult:
        """Generations reserve to completion first; then DISAGG_GENERATION_INIT requests, then contexts,
        in order until one misses on blocks."""
        assert self.acct is not None
        reserved = NoEvictScheduledBlocks(self.acct)
        skipper = PrefixSkipper(self.acct, self.prefix_aware, skipping=not static)
        skipper.prefill_with_chunked_contexts(active)
        peft = _PeftRound(self.peft)
        fitting: list[LlmRequest] = []
        pending: list[LlmRequest] = []
        pending_gen_init: list[LlmRequest] = []
        for req in active:
            if not schedulable_with_disagg_exception(req):
                continue
            if len(fitting) >= self.max_num_requests:
                break
            if self._first_pass(req):
                fitting.append(req)
                reserved.decrement_reserved_blocks(req)
                peft.claim(req)
            elif req.is_disagg_generation_init_state:
                pending_gen_init.append(req)
            else:
                pending.append(req)
        if pending_gen_init:
            pending = pending_gen_init + pending
        if not static or not fitting:
            for req in pending:
                if skipper.beneficial_to_skip(req):
                    continue
                if len(fitting) >= self.max_num_requests:
                    break
                summary = skipper.summary(req)
                if not reserved.enough_available_blocks(req, summary):
                    break  # head-of-line: a later (likely longer) request must not jump the queue
                if not peft.fits(req):
                    continue  # only adapter pages are short: later requests may still fit
                peft.claim(req)
                fitting.append(req)
                reserved.decrement_reserved_blocks(req, summary)
                skipper.register_contributed_blocks(req)
        return CapacityResult(fitting, [], skipper.num_skipped)

    @staticmethod
    def _is_started(req: LlmRequest) -> bool:
        """Holds KV worth pausing for: a context past its first chunk, or a generation."""
        return req.in_capacity_window and (
            (req.is_context_init_state and not req.is_first_context_chunk)
            or req.is_generation_in_progress_state
        )

    def _max_utilization(self, active: Sequence[LlmRequest], inflight: Collection[str]) -> CapacityResult:
        """Reserve next-step blocks; on a miss pause the last started request in [current, end) and retry."""
        assert self.acct is not None
        blocks = MaxUtilizationScheduledBlocks(self.acct, self.two_steps)
        skipper = PrefixSkipper(self.acct, self.prefix_aware, skipping=True)
        skipper.prefill_with_chunked_contexts(active)
        peft = _PeftRound(self.peft)
        fitting: list[LlmRequest] = []
        paused: list[LlmRequest] = []
        reqs = list(active)
        end = len(reqs)
        i = 0
        while i < end:
            req = reqs[i]
            # prefix-aware skipping concerns first context chunks only: others never consult it
            first_chunk = req.is_context_init_state and req.is_first_context_chunk
            if not schedulable_with_disagg_exception(req) or (
                first_chunk and skipper.beneficial_to_skip(req)
            ):
                i += 1
                continue
            summary = skipper.summary(req) if first_chunk else None
            if self._try_schedule(req, fitting, blocks, peft, summary):
                if first_chunk:
                    skipper.register_contributed_blocks(req)
                i += 1
                continue
            victim = next(
                (
                    j
                    for j in range(end - 1, i - 1, -1)
                    if self._is_started(reqs[j]) and reqs[j].request_id not in inflight
                ),
                None,
            )
            if victim is None:
                break
            self.acct.scheduling_remove_sequence(reqs[victim])
            paused.append(reqs[victim])
            end = victim  # the victim and everything after it are out of this round
        return CapacityResult(fitting, paused, skipper.num_skipped)

    def _try_schedule(
        self,
        req: LlmRequest,
        fitting: list[LlmRequest],
        blocks: MaxUtilizationScheduledBlocks,
        peft: _PeftRound,
        summary: PrefixReuseSummary | None,
    ) -> bool:
        """Predict-then-commit: a failed probe leaves no trace, so retries never double-count."""
        if len(fitting) >= self.max_num_requests:
            return False
        total = blocks.prepare_blocks_if_schedulable(req, summary)
        if total is None or not peft.fits(req):
            return False
        peft.claim(req)
        blocks.update_scheduled_blocks(total)
        fitting.append(req)
        return True
