"""Workload rows become Requests when they arrive: built from the prepared columns, registered with
the oracle and the metrics. The run loop does this once per arrival, so it is compiled code."""

from __future__ import annotations

from typing import Any

import numpy as np
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import Request
from schedsim.worlds.oracle import WorkloadOracle


class RowRequests:
    """Row i's fresh, unscheduled Request, read from the workload's columns (no Request is kept:
    a million-row workload holds only the columns)."""

    def __init__(
        self,
        columns: WorkloadColumns,
        hashes: list[Any],
        structured: np.ndarray,
        lora: list[Any],
        num_spec_tokens: int,
    ) -> None:
        self.columns, self.hashes, self.structured, self.lora = columns, hashes, structured, lora
        self.num_spec_tokens = num_spec_tokens

    def request(self, i: int) -> Request:
        """Row i's Request (`.item`: a Python scalar, no numpy scalar)."""
        c, lora = self.columns, self.lora[i]
        return Request(
            c.ids[i],
            c.arrival.item(i),
            c.prompt.item(i),
            c.max_tokens.item(i),
            prompt_block_hashes=self.hashes[i],
            structured_output=self.structured.item(i),
            priority=c.priority.item(i),
            lora_id=None if lora is None else int(lora),
            num_spec_tokens=self.num_spec_tokens,
        )


class Arrivals:
    """The k-th arrival's Request (the input stream's `make`): built when it is due, or taken from
    ready-made ones, then registered with the oracle (its EOS position and key) and the metrics."""

    def __init__(
        self,
        rows: np.ndarray,
        build: RowRequests,
        ready: list[Request] | None,
        targets: np.ndarray,
        keys: np.ndarray,
        oracle: WorkloadOracle,
        metrics: MetricsRecorder,
    ) -> None:
        """rows: the workload row of each arrival; keys: each row's oracle key (`request_keys`)."""
        self.rows, self.build, self.ready = rows, build, ready
        self.targets, self.keys = targets, keys
        self.oracle, self.metrics = oracle, metrics

    def __call__(self, k: int) -> Request:
        i: int = self.rows.item(k)
        ready = self.ready
        req = self.build.request(i) if ready is None else ready[i]
        self.oracle.add(req.request_id, self.targets.item(i), self.keys.item(i))
        self.metrics.admit(i, req)
        return req
