"""`orca`: Orca's iteration-level scheduling (OSDI'22): whole prompts, KV reserved to completion.

Every step decodes all running requests and admits waiting ones in FCFS order while the whole
prompt fits the step's token budget and the request's KV for prompt plus max_tokens can be
reserved (Orca's `n_rsrv`, kv_reservation="max_tokens"), so no request is ever preempted; with
kv_reservation="none" only the prompt's KV is needed and a decode that finds the pool full
preempts the newest request by recompute. No chunked prefill: a prompt that does not fit the
remaining budget waits, and so does everything behind it (head-of-line).
"""

from __future__ import annotations

from ..plan import StepPlan
from ..request import Request
from .base import BasePolicy
from .config import OrcaConfig
from .fastforward import OrcaFastForward


def reserve_whole(policy: BasePolicy, req: Request, to_completion: bool = True) -> int | None:
    """KV for the whole prompt (plus every output fed back, if `to_completion`); tokens, or None."""
    hit_blocks, hit = policy.prefix_hit(req)
    num_new = req.num_tokens - hit
    lookahead = max(policy.max_new_tokens(req) - req.num_output_tokens - 1, 0) if to_completion else 0
    if not policy.allocate(req, num_new, hit_blocks, hit, lookahead=lookahead):
        return None
    return num_new


class OrcaPolicy(BasePolicy):
    """Orca's scheduler on the shared step interface (synchronous: one batch in flight)."""

    max_concurrent_batches = 1
    lazy_private_kv = True  # prefix_hit looks up only requests that hold no blocks

    def __init__(self, config: OrcaConfig) -> None:
        self.reserve = config.kv_reservation == "max_tokens"
        self.clip_max_new_to_pool = self.reserve
        super().__init__(config)

    def fast_forward(self) -> OrcaFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward)."""
        return OrcaFastForward(self)

    def schedule_into(self, plan: StepPlan) -> None:
        """Decode every running request, then admit whole prompts while budget and KV allow."""
        # Reserved to completion a decode never fails; without reservation the newest is preempted.
        budget = self.config.max_num_batched_tokens - self.decode_running(plan)
        if self.preempted_req_ids:
            return  # vLLM: no admission in a step that preempted
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            hit_blocks, hit = self.prefix_hit(req)
            if req.num_tokens - hit > budget:
                break
            num_new = reserve_whole(self, req, self.reserve)
            if num_new is None:
                break
            self.admit(plan, req, num_new)
            budget -= num_new
