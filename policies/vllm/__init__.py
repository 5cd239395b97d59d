"""vLLM V1 scheduler policies: `vllm` (Scheduler) and `vllm-async` (AsyncScheduler)."""

from ..interface import register_policy
from .async_scheduler import VllmAsyncScheduler
from .config import VllmConfig
from .scheduler import VllmScheduler

# registered here, not by class decorators: a decorated class cannot be compiled (schedsim.accel)
register_policy("vllm", "vLLM 0.33.0 V1 scheduler: unified token budget, chunked prefill, prefix "
                "caching, recompute preemption (1 batch in flight)", VllmConfig)(VllmScheduler)
register_policy("vllm-async", "vLLM 0.33.0 AsyncScheduler: schedules step s+1 before step s's "
                "output returns, using output placeholders (2 batches in flight)",
                VllmConfig)(VllmAsyncScheduler)

__all__ = ["VllmAsyncScheduler", "VllmConfig", "VllmScheduler"]
