"""Requests a run refused before they reached the policy: how many, and why, for the warning a
run that drops part of its workload must give (a rate measured over half the requests is not the
answer to the question asked)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedsim.latency.specs import get_model_spec
from schedsim.run.config import RunConfig


@dataclass(frozen=True)
class Rejections:
    """`count` of `total` requests rejected: `kv_pool` of them by the policy on arrival because
    their KV blocks exceed the whole pool, the rest because their prompt leaves no room for an
    output token under `max_model_len` (vLLM refuses such prompts when they arrive)."""

    count: int
    total: int
    max_model_len: int | None = None
    kv_pool: int = 0

    def message(self) -> str:
        """One line: the count, the reasons and the remedies."""
        reasons = []
        too_long = self.count - self.kv_pool
        if too_long:
            limit = "max_model_len" if self.max_model_len is None else f"max_model_len={self.max_model_len:,}"
            reasons.append(
                f"{too_long:,} leave no room for an output token under {limit} "
                "(raise --max-model-len, or use a model with a longer context)"
            )
        if self.kv_pool:
            reasons.append(
                f"{self.kv_pool:,} need more KV blocks than the whole pool holds (raise --num-gpu-blocks)"
            )
        return f"{self.count:,} of {self.total:,} requests rejected: " + "; ".join(reasons)


def max_model_len_of(config: RunConfig) -> int:
    """The max_model_len a simulated run resolves to: the config's, else the model's context."""
    return config.max_model_len or get_model_spec(config.model).max_position_embeddings


def unfinished(summary: Mapping[str, Any]) -> str | None:
    """The warning for requests still unfinished when the run ended (its `max_sim_time`): the
    summary's latencies and throughputs describe the finished ones only (None when all ended)."""
    count = int(summary.get("num_unfinished") or 0)
    if not count:
        return None
    total = int(summary.get("num_requests") or count)
    return (
        f"{count:,} of {total:,} requests unfinished when the run ended (max_sim_time): the summary's "
        "latencies and throughputs cover the finished ones only (raise --max-sim-time)"
    )


def rejections(summary: Mapping[str, Any], max_model_len: int | None = None) -> Rejections | None:
    """The run's rejections from its summary (None when it rejected nothing)."""
    count = int(summary.get("num_rejected") or 0)
    if not count:
        return None
    total = int(summary.get("num_requests") or count)
    return Rejections(count, total, max_model_len, int(summary.get("num_rejected_kv") or 0))
