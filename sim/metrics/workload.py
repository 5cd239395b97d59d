"""The per-request workload fields the results need, as columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from schedsim.policies import Request


@dataclass
class WorkloadColumns:
    """The per-request workload fields the results need, as columns (no Request objects kept)."""

    ids: list[str]
    arrival: np.ndarray
    prompt: np.ndarray
    max_tokens: np.ndarray
    priority: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_requests(cls, requests: list[Request]) -> WorkloadColumns:
        """Columns of ready-made Requests (the real backend's and the validation's runs)."""
        return cls(
            [r.request_id for r in requests],
            np.array([r.arrival_time for r in requests], dtype=float),
            np.array([r.prompt_len for r in requests], dtype=np.int64),
            np.array([r.max_tokens for r in requests], dtype=np.int64),
            np.array([r.priority for r in requests], dtype=np.int64),
        )
