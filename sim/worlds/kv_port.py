"""What a replica's world needs from the cluster's KV transfers (a prefill/decode pair).

The world tells its port about every launched plan (the plan's `kv_reqs_to_send` announce sends,
its `kv_reqs_to_recv` start loads when the step starts on the GPU), asks it to fill each collected
StepResult with the transfers that ended by the step's end, and, while the engine waits for a
transfer, whether one has ended. `schedsim.cluster.transfers` implements it.
"""

from __future__ import annotations

from typing import Protocol

from schedsim.policies import StepPlan, StepResult


class KVTransferPort(Protocol):
    """One replica's end of the cluster's KV transfers."""

    def on_launch(self, plan: StepPlan, requested: float, start: float) -> None:
        """A plan was launched at `requested`; its step starts on the GPU at `start`."""

    def deliver(self, result: StepResult, t: float) -> None:
        """Add the transfers of this replica that ended by t (and were not delivered yet)."""

    def ready(self, t: float) -> bool:
        """A transfer of this replica ended by t and is not delivered yet."""

    def busy(self) -> bool:
        """A transfer of this replica is announced, in flight or undelivered."""
