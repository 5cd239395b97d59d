"""`vllm-async`: vLLM 0.33.0's `AsyncScheduler` (vllm/v1/core/sched/async_scheduler.py).

With two batches in flight, step s+1 is scheduled before step s's output is back: every request
that samples in a step is charged output placeholders for the token(s) it will deliver, so the
next schedule already counts them. Only `_update_after_schedule` differs from `Scheduler`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan import StepPlan
from ..request import Request
from .config import VllmConfig
from .scheduler import Scheduler


class AsyncScheduler(Scheduler):
    """The post-schedule hook reserves each sampling request's in-flight output as placeholders."""

    max_concurrent_batches = 2

    def __init__(self, config: VllmConfig) -> None:
        if config.num_spec_tokens > 0 and config.spec_method == "ngram":
            # vLLM's VllmConfig: the V1 model runner has no async scheduling with ngram drafts
            raise ValueError(
                "VllmConfig.spec_method 'ngram' cannot run with async scheduling "
                "(vllm-async); use 'draft_model' or the vllm policy"
            )
        super().__init__(config)
        # reusable read-only placeholder list for speculative decoding
        self._spec_token_placeholders: list[int] = [-1] * config.num_spec_tokens

    def _update_after_schedule(self, plan: StepPlan, scheduled: list[Request]) -> None:
        """Scheduler's hook, then 1 + drafts output placeholders and K draft placeholders for
        every request that samples (is not a prefill chunk)."""
        super()._update_after_schedule(plan, scheduled)
        spec = plan.spec_decode_tokens
        pending = False
        for request in scheduled:
            if request.is_prefill_chunk:
                continue
            owed = request.num_output_placeholders
            pending = pending or (request.structured_output and owed > 0)
            drafts = spec.get(request.request_id) if spec else None
            request.num_output_placeholders = owed + 1 + (len(drafts) if drafts else 0)
            # Draft placeholders: the real drafts stay with the executor.
            request.spec_token_ids = self._spec_token_placeholders
        plan.pending_structured_output_tokens = pending

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Async scheduling never sees real drafts (vLLM skips this call): placeholders stand in."""
        return None
