"""vLLM V1 scheduler policies: `vllm` (Scheduler) and `vllm-async` (AsyncScheduler)."""

from .async_scheduler import VllmAsyncScheduler
from .config import VllmConfig
from .scheduler import VllmScheduler

__all__ = ["VllmAsyncScheduler", "VllmConfig", "VllmScheduler"]
