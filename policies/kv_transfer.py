"""The KV-transfer contract between a disaggregated pair of replicas and their schedulers.

vLLM calls it `kv_transfer_params` (a KV connector reads it); TensorRT-LLM calls the same roles
context-only and generation-only requests. The cluster sets it when it routes a request to one
side of a prefill/decode pair; each policy family maps it onto its engine's own states
(vLLM: `WAITING_FOR_REMOTE_KVS` and delayed block frees; TensorRT-LLM: the `DISAGG_*` states).

The conversation, in step terms:
- prefill side (`do_remote_decode`): the request prefills and samples its first token, finishes,
  and its blocks stay allocated; the plan that frees it lists it in `kv_reqs_to_send`. The blocks
  are freed when a later `StepResult.finished_sending` names it.
- decode side (`do_remote_prefill`): the scheduler allocates blocks for the remote tokens and parks
  the request until the load ends; the plan that starts the load lists it in `kv_reqs_to_recv`. A
  later `StepResult.finished_recving` names it (loaded), or `failed_kv_load_ids` (the load failed:
  the engine's own fallback applies). An entry of 0 tokens is a notification, not a load: the
  decode side dropped the request before loading it, and the prefill side's `finished_sending`
  follows as for a load.

What the cluster (`schedsim.cluster`) does around it: the prefill side's request has
`max_tokens=1`; the decode side's is a new Request with the same id, prompt and block hashes and
the workload's `max_tokens`, with no output tokens, except on an engine whose decode side
continues after the prefill's first token (TensorRT-LLM's generation-only request), where that
token is its only output token. A finished transfer is named in the first StepResult of each side
whose step ends at or after the transfer's end.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KVTransferParams:
    """Which side of a prefill/decode pair this replica serves for one request."""

    # prefill side: stop after the first token and hold the KV until the decode side has read it
    do_remote_decode: bool = False
    # decode side: the prompt's KV comes from the remote prefill replica `remote_engine_id`
    do_remote_prefill: bool = False
    # the other replica of the pair (cluster index), -1 while not yet chosen
    remote_engine_id: int = -1

    def __post_init__(self) -> None:
        """A request is on one side of a pair, never both."""
        if self.do_remote_decode == self.do_remote_prefill:
            raise ValueError(
                "KVTransferParams: exactly one of do_remote_decode, do_remote_prefill must be set "
                f"(got do_remote_decode={self.do_remote_decode}, do_remote_prefill={self.do_remote_prefill})"
            )
