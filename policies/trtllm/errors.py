"""Where TensorRT-LLM's own rules fail: the policy stops with one of these instead of inventing a way out.

Each is a finding about TensorRT-LLM (the same scheduler state would fail or hang there), not a
simulator error; the message names the step, the requests and the cause.
"""

from __future__ import annotations

from ..interface import EngineFailure


class KvCacheExhaustedError(RuntimeError):
    """The KV cache manager has no free block where one is needed (TensorRT-LLM: "No free blocks
    left"); prepare_resources turns it into KvCacheExhausted."""


class TrtllmFailure(EngineFailure):
    """TensorRT-LLM itself would fail (or hang) at this step."""

    engine = "TensorRT-LLM"


class KvCacheExhausted(TrtllmFailure):
    """prepare_resources needed a KV block and none was free (TLLM_CHECK "No free blocks")."""

    cause = "kv-cache-exhausted"


class TokenBudgetExceeded(TrtllmFailure):
    """The forward pass exceeds max_num_tokens after fit_token_budget (the `_prepare_tp_inputs` assert)."""

    cause = "token-budget"


class SchedulerWedged(TrtllmFailure):
    """Requests are active, nothing is in flight and nothing can ever be scheduled again."""

    cause = "wedge"
