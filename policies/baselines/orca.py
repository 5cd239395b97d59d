"""`orca`: Orca's iteration-level scheduling (OSDI'22): whole prompts, KV reserved to completion.

Every step decodes all running requests and admits waiting ones in FCFS order while the whole
prompt fits the step's token budget and the request's KV for prompt plus max_tokens can be
reserved (Orca's `n_rsrv`), so no request is ever preempted. No chunked prefill: a prompt that
does not fit the remaining budget waits, and so does everything behind it (head-of-line).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig
from ..interface import register_policy
from ..plan import StepPlan
from ..request import Request, RequestStatus
from .base import BasePolicy


@dataclass
class OrcaConfig(SchedulerConfig):
    """Orca has no chunked prefill; the budget caps a step's tokens (decodes count one each)."""

    enable_chunked_prefill: bool = False

    def __post_init__(self) -> None:
        """Orca runs whole prompts only."""
        super().__post_init__()
        if self.enable_chunked_prefill:
            raise ValueError("OrcaConfig.enable_chunked_prefill must be False: Orca runs whole prompts")


def reserve_whole(policy: BasePolicy, req: Request) -> int | None:
    """Reserve KV for the whole prompt plus every output that is fed back; tokens to run, or None."""
    hit_blocks, hit = policy._prefix_hit(req)
    num_new = req.num_tokens - hit
    lookahead = max(policy._max_new_tokens(req) - req.num_output_tokens - 1, 0)
    if not policy._allocate(req, num_new, hit_blocks, hit, lookahead=lookahead):
        return None
    return num_new


def admit(policy: BasePolicy, plan: StepPlan, req: Request, num_new: int) -> None:
    """Move the head of the waiting queue into the running batch."""
    policy.waiting.popleft()
    resumed = req.status == RequestStatus.PREEMPTED
    req.status = RequestStatus.RUNNING
    policy.running.append(req)
    (plan.resumed_req_ids if resumed else plan.new_req_ids).append(req.request_id)
    policy._add_to_plan(plan, req, num_new)


@register_policy("orca", "Orca iteration-level batching: whole prompts, KV reserved to completion",
                 OrcaConfig)
class OrcaPolicy(BasePolicy):
    """Orca's scheduler on the shared step interface (synchronous: one batch in flight)."""

    max_concurrent_batches = 1
    clip_max_new_to_pool = True

    def __init__(self, config: OrcaConfig) -> None:
        super().__init__(config)

    def _schedule_into(self, plan: StepPlan) -> None:
        """Decode every running request, then admit whole prompts while budget and KV allow."""
        budget = self.config.max_num_batched_tokens
        for req in self.running:
            # Reserved to completion at admission: a decode never needs a new block here.
            if not self._allocate(req, 1):
                raise AssertionError(f"orca: request {req.request_id} outgrew its reservation")
            self._add_to_plan(plan, req, 1)
            budget -= 1
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            hit_blocks, hit = self._prefix_hit(req)
            if req.num_tokens - hit > budget:
                break
            num_new = reserve_whole(self, req)
            if num_new is None:
                break
            admit(self, plan, req, num_new)
            budget -= num_new
