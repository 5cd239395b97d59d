"""`vllm-async`: vLLM 0.33.0's AsyncScheduler (output placeholders, two batches in flight)."""

from __future__ import annotations

from collections.abc import Mapping

from ..plan import StepPlan
from .config import VllmConfig
from .scheduler import VllmScheduler


class VllmAsyncScheduler(VllmScheduler):
    """Only the post-schedule hook differs: reserve the in-flight step's output as placeholders."""

    max_concurrent_batches = 2
    is_async = True

    def __init__(self, config: VllmConfig) -> None:
        super().__init__(config)
        self._spec_placeholders: list[int] = [-1] * config.num_spec_tokens

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """The base hook (computed/in-flight/is_prefill_chunk), then, for every request that samples,
        1 + drafts output placeholders and [-1] * K draft placeholders (one pass)."""
        requests = self.requests
        spec = plan.spec_decode_tokens
        placeholders = self._spec_placeholders
        seq = self.kv.sched_step_seq if self.config.defer_block_free else None
        has_so = pending = False
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests[rid]
            computed = request.num_computed_tokens + n
            request.num_computed_tokens = computed
            request.num_in_flight_tokens += n
            if seq is not None:
                request.last_sched_seq = seq
            owed = request.num_output_placeholders
            chunk = computed < request.prompt_len + len(request.output_token_ids) + owed
            request.is_prefill_chunk = chunk
            if chunk:
                continue
            if request.structured_output:
                has_so = True
                pending = pending or owed > 0
            drafts = spec.get(rid) if spec else None
            request.num_output_placeholders = owed + 1 + (len(drafts) if drafts else 0)
            # Draft placeholders: the real drafts stay with the executor.
            request.spec_token_ids = placeholders
        plan.has_structured_output_requests = has_so
        plan.pending_structured_output_tokens = pending
        self.finished_req_ids = []
        self.preempted_req_ids = []

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Async scheduling never sees real drafts (vLLM skips this call): placeholders stand in."""
        return None
