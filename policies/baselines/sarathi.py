"""`sarathi`: Sarathi-Serve's stall-free batching (OSDI'24).

Each step first gives every decoding request its one token, then continues partially prefilled
requests, then admits new ones, each prefill taking a chunk of what is left of the token budget
(the chunk size, max_num_batched_tokens). A prefill therefore never stalls a decode. Under KV
pressure the most recently admitted request is preempted by recompute and goes back to the front
of the waiting queue; nothing is admitted in a step that preempted (vLLM v0, Sarathi's base).
"""

from __future__ import annotations

from ..plan import StepPlan
from ..request import RequestStatus
from .base import BasePolicy
from .config import SarathiConfig
from .fastforward import SarathiFastForward


class SarathiPolicy(BasePolicy):
    """Stall-free batching on the shared step interface (synchronous: one batch in flight)."""

    max_concurrent_batches = 1
    lazy_private_kv = True  # prefix_hit looks up only requests that hold no blocks

    def __init__(self, config: SarathiConfig) -> None:
        super().__init__(config, watermark=config.watermark)

    def fast_forward(self) -> SarathiFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward)."""
        return SarathiFastForward(self)

    def schedule_into(self, plan: StepPlan) -> None:
        """Decodes, then ongoing prefill chunks, then new prefill chunks (unless we preempted)."""
        budget = self.config.max_num_batched_tokens
        decodes = [r for r in self.running if not r.is_prefill_chunk]
        prefills = [r for r in self.running if r.is_prefill_chunk]
        for req in decodes + prefills:
            if budget <= 0:
                break
            if req.status != RequestStatus.RUNNING:  # preempted earlier in this pass
                continue
            num_new = min(req.num_tokens - req.num_computed_tokens, budget)
            if num_new <= 0:
                continue  # its last token is still in flight (driven with a batch queue)
            ok, returned = self.allocate_or_preempt(plan, req, num_new)
            budget += returned
            if not ok:
                break
            self.add_to_plan(plan, req, num_new)
            budget -= num_new
        if not self.preempted_req_ids:
            self._admit(plan, budget)

    def _admit(self, plan: StepPlan, budget: int) -> None:
        """New (or resumed) requests in FCFS order, each a chunk of the remaining budget."""
        while budget > 0 and self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            hit_blocks, hit = self.prefix_hit(req)
            num_new = min(req.num_tokens - hit, budget)
            if not self.allocate(req, num_new, hit_blocks, hit):
                break
            self.admit(plan, req, num_new)
            budget -= num_new
