"""TrtllmStats: policy-wide counters for the metrics tables (per-request ones live on Request)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TrtllmStats:
    """Counts a run summary reports next to the tables."""

    num_steps: int = 0
    num_pauses: int = 0
    num_prefix_skips: int = 0
    num_computed_tokens: int = 0
    num_recomputed_tokens: int = 0
    num_truncated_tokens: int = 0
    num_reused_tokens: int = 0  # prompt tokens addSequence found in the cache
