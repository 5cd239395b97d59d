"""TensorRT-LLM's two-level scheduler (capacity scheduler + micro-batch scheduler) as schedsim policies.

Registered names: trtllm:max-requests, trtllm:guaranteed-no-evict, trtllm:static-batch,
trtllm:max-utilization; options (chunking_policy, chunk_unit_size, enable_prefix_aware_scheduling,
two_step_lookahead, max_batch_size, max_num_tokens, max_input_len, ...) live in TrtllmConfig.
The KV-aware policies run on TensorRT-LLM's own block manager (radix-tree reuse,
`kv_cache_manager.py`), not on the vLLM pool of `schedsim.policies.kv_cache`, and serve either side
of a prefill/decode pair (`cache_transceiver.py`: context-only and generation-only requests).
"""

from __future__ import annotations

from collections.abc import Callable

from ..registry import register_policy
from .block_keys import BlockKeys
from .cache_transceiver import CacheTransceiver
from .capacity import CapacityResult, CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from .chunking import ChunkingPolicy, reuse_adjusted_compute, set_ctx_requests_chunk_size
from .config import TrtllmConfig
from .errors import (
    KvCacheExhausted,
    KvCacheExhaustedError,
    SchedulerWedged,
    TokenBudgetExceeded,
    TrtllmFailure,
)
from .kv_accounting import KvAccounting
from .kv_cache_manager import KVCacheManager, PrefixReuseSummary
from .micro_batch import ContextChunkingConfig, MicroBatch, MicroBatchScheduler
from .pause import pause
from .policy import TrtllmPolicy
from .resource_manager import ResourceManager
from .scheduled_requests import ScheduledRequests
from .state import CAPACITY_WINDOW, MICRO_BATCH_WINDOW, LlmRequest, LlmRequestState, LlmRequestType
from .stats import TrtllmStats

_DESCRIPTIONS = {
    CapacitySchedulerPolicy.MAX_REQUESTS: "TensorRT-LLM, request-count cap only (no KV admission check)",
    CapacitySchedulerPolicy.GUARANTEED_NO_EVICT: "TensorRT-LLM, reserve KV to completion, never pause",
    CapacitySchedulerPolicy.STATIC_BATCH: "TensorRT-LLM, no-evict admitting only into an empty batch",
    CapacitySchedulerPolicy.MAX_UTILIZATION: "TensorRT-LLM, reserve next-step KV, pause and recompute",
}


def _factory(policy: CapacitySchedulerPolicy) -> Callable[[TrtllmConfig], TrtllmPolicy]:
    """Bind a capacity policy to the shared adapter."""

    def make(config: TrtllmConfig) -> TrtllmPolicy:
        return TrtllmPolicy(config, policy)

    make.__name__ = f"make_trtllm_{policy.name.lower()}"
    return make


for _policy, _description in _DESCRIPTIONS.items():
    register_policy(f"trtllm:{_policy.value}", _description, TrtllmConfig)(_factory(_policy))

__all__ = [
    "CAPACITY_WINDOW",
    "MICRO_BATCH_WINDOW",
    "BlockKeys",
    "CacheTransceiver",
    "CapacityResult",
    "CapacityScheduler",
    "CapacitySchedulerPolicy",
    "ChunkingPolicy",
    "ContextChunkingConfig",
    "KVCacheManager",
    "KvAccounting",
    "KvCacheExhausted",
    "KvCacheExhaustedError",
    "LlmRequest",
    "LlmRequestState",
    "LlmRequestType",
    "MicroBatch",
    "MicroBatchScheduler",
    "PeftBudget",
    "PrefixReuseSummary",
    "ResourceManager",
    "ScheduledRequests",
    "SchedulerWedged",
    "TokenBudgetExceeded",
    "TrtllmConfig",
    "TrtllmFailure",
    "TrtllmPolicy",
    "TrtllmStats",
    "pause",
    "reuse_adjusted_compute",
    "set_ctx_requests_chunk_size",
]
