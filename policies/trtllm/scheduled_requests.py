"""ScheduledRequests: one step's batch as PyExecutor holds it (contexts binned by chunk kind)."""

from __future__ import annotations

from .state import LlmRequest


class ScheduledRequests:
    """Non-last context chunks, then last chunks (they sample), then generations; plus the paused."""

    def __init__(
        self,
        generation_requests: list[LlmRequest] | None = None,
        paused_requests: list[LlmRequest] | None = None,
    ) -> None:
        self.context_requests_chunking: list[LlmRequest] = []
        self.context_requests_last_chunk: list[LlmRequest] = []
        self.generation_requests = [] if generation_requests is None else generation_requests
        self.paused_requests = [] if paused_requests is None else paused_requests

    @property
    def context_requests(self) -> list[LlmRequest]:
        """The contexts in batch order (a new list)."""
        return self.context_requests_chunking + self.context_requests_last_chunk

    def all_requests(self) -> list[LlmRequest]:
        """Contexts then generations."""
        return self.context_requests + self.generation_requests

    def reset_context_requests(self, context_requests: list[LlmRequest] | None = None) -> None:
        """Re-bin the contexts by whether their chunk reaches the end of the prompt, keeping order."""
        contexts = self.context_requests if context_requests is None else context_requests
        self.context_requests_chunking = [r for r in contexts if not r.is_last_context_chunk]
        self.context_requests_last_chunk = [r for r in contexts if r.is_last_context_chunk]

    @property
    def is_empty(self) -> bool:
        """Nothing runs and nothing was paused."""
        return not (
            self.context_requests_chunking
            or self.context_requests_last_chunk
            or self.generation_requests
            or self.paused_requests
        )
