"""`static`: FasterTransformer-style request-level batching.

A batch is formed only when nothing is running: waiting requests in FCFS order while the batch
has room (max_num_seqs), their prompts together fit max_num_batched_tokens and each one's KV for
prompt plus max_tokens can be reserved. The batch's prompts run in one step, then the batch
decodes until its longest request finishes; nothing is admitted before it drains. Requests that
finish early leave the plan (their padding compute in FasterTransformer is not modelled).
"""

from __future__ import annotations

from ..plan import StepPlan
from .base import BasePolicy
from .config import StaticConfig
from .fastforward import BaselineFastForward
from .orca import reserve_whole


class StaticPolicy(BasePolicy):
    """Static batching on the shared step interface (synchronous: one batch in flight)."""

    max_concurrent_batches = 1
    lazy_private_kv = True  # prefix_hit looks up only requests that hold no blocks
    clip_max_new_to_pool = True

    def __init__(self, config: StaticConfig) -> None:
        super().__init__(config)

    def fast_forward(self) -> BaselineFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward)."""
        return BaselineFastForward(self)

    def schedule_into(self, plan: StepPlan) -> None:
        """Decode the current batch; form a new one only once it has drained."""
        if self.running:
            for req in self.running:
                if req.num_tokens <= req.num_computed_tokens:
                    continue  # its last token is still in flight (driven with a batch queue)
                if not self.allocate(req, 1):
                    raise AssertionError(f"static: request {req.request_id} outgrew its reservation")
                self.add_to_plan(plan, req, 1)
            return
        budget = self.config.max_num_batched_tokens
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            hit_blocks, hit = self.prefix_hit(req)
            if req.num_tokens - hit > budget:
                break
            num_new = reserve_whole(self, req)
            if num_new is None:
                break
            self.admit(plan, req, num_new)
            budget -= num_new
