"""`vllm-async`: vLLM 0.33.0's AsyncScheduler (output placeholders, two batches in flight)."""

from __future__ import annotations

from collections.abc import Mapping

from ..interface import register_policy
from ..plan import StepPlan
from .config import VllmConfig
from .scheduler import VllmScheduler


@register_policy("vllm-async", "vLLM 0.33.0 AsyncScheduler: schedules step s+1 before step s's "
                 "output returns, using output placeholders (2 batches in flight)", VllmConfig)
class VllmAsyncScheduler(VllmScheduler):
    """Only the post-schedule hook differs: reserve the in-flight step's output as placeholders."""

    max_concurrent_batches = 2
    is_async = True

    def __init__(self, config: VllmConfig) -> None:
        super().__init__(config)
        self._spec_placeholders: list[int] = [-1] * config.num_spec_tokens

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """After the base hook sets is_prefill_chunk: every sampling request owes 1 + drafts tokens."""
        super()._update_after_schedule(plan)
        requests = self.requests
        spec = plan.spec_decode_tokens
        placeholders = self._spec_placeholders
        pending = False
        for rid in plan.num_scheduled_tokens:
            request = requests[rid]
            if request.is_prefill_chunk:
                continue
            pending |= request.structured_output and request.num_output_placeholders > 0
            drafts = spec.get(rid)
            request.num_output_placeholders += 1 + (len(drafts) if drafts else 0)
            # Draft placeholders: the real drafts stay with the executor.
            request.spec_token_ids = placeholders
        plan.pending_structured_output_tokens = pending

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Async scheduling never sees real drafts (vLLM skips this call): placeholders stand in."""
        return None
