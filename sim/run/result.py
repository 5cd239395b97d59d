"""RunResult: the tidy tables one run produces, with their documented column schemas.

Times are seconds of simulated time since the workload's first arrival (t = 0) in the tables and
milliseconds in the summary (vLLM's benchmark names). A value that does not exist (a request that
never produced a token has no TTFT) is NaN, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# One row per request of the workload, in workload order.
REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "request id from the workload",
    "arrival_time": "s, when the request reached the engine",
    "prompt_tokens": "prompt length",
    "target_output_tokens": "output length the oracle plays (EOS after it)",
    "max_tokens": "stop length given to the policy",
    "first_scheduled_time": "s, end of the first schedule() that gave it tokens (NaN: never)",
    "queueing_time": "s, first_scheduled_time - arrival_time",
    "first_token_time": "s, when its first output token was delivered",
    "finish_time": "s, when its finish (or abort) was reported (NaN: unfinished)",
    "ttft": "s, first_token_time - arrival_time",
    "tpot": "s, (last token time - first token time) / (num_output_tokens - 1); NaN below 2 tokens",
    "mean_itl": "s, mean gap between consecutive token deliveries (a delivery of k tokens counts "
    "k-1 gaps of 0 after the first, as vLLM's benchmark does)",
    "e2e": "s, finish_time - arrival_time",
    "num_output_tokens": "tokens delivered",
    "num_cached_tokens": "prefix-cache hit tokens at its first schedule",
    "finish_reason": "stop | length | abort | error | ignored | None (still running at the end)",
    "num_preemptions": "times preempted (recompute)",
    "num_pauses": "times paused (policies that pause instead of preempting)",
    "num_recomputed_tokens": "tokens computed again after preemption",
    "num_truncated_tokens": "tokens trimmed after a stop",
    "hol_blocking_time": "s waiting while a request ahead of it in the queue blocked admission "
    "and it itself would have fit in the leftover budget, seats and KV blocks",
    "output_hash": "62-bit polynomial hash of the output token ids (compare runs: equal hash, equal tokens)",
}

# One row per launched step (batch), in launch order. Times and kv_usage are float64, counts
# (step and num_*) int32 and deferred_sampling bool: a 1M-request run has millions of steps.
STEP_COLUMNS: dict[str, str] = {
    "step": "step id (plan.step_id, launch order)",
    "schedule_time": "s, end of the schedule() phase that made the plan",
    "start": "s, GPU start of the step",
    "end": "s, GPU end of the step (sampling included)",
    "duration": "s, end - start",
    "gpu_time": "s, modelled forward + sample time, plus the draft model's passes when timed "
    "(duration minus waits for deferred sampling)",
    "num_prefill_reqs": "requests running a prefill chunk (including recompute after preemption)",
    "num_decode_reqs": "requests decoding",
    "num_prefill_tokens": "tokens of prefill chunks",
    "num_decode_tokens": "tokens of decodes, drafts included",
    "num_spec_tokens": "draft tokens verified",
    "num_running": "running requests after schedule()",
    "num_waiting": "waiting requests after schedule()",
    "kv_usage": "fraction of usable KV blocks in use after schedule()",
    "num_preempted": "requests preempted by this schedule()",
    "num_paused": "requests paused by this schedule()",
    "num_finished": "requests whose finish the update_from_output of this step reported",
    "deferred_sampling": "sampling waited for the previous step's output (structured output)",
}

# One row per CPU or GPU busy interval, by start time (CPU first at a tie, then in the order the
# engine recorded them). resource and kind are categoricals, start/end float64, step int32.
TIMELINE_COLUMNS: dict[str, str] = {
    "resource": "cpu | gpu",
    "kind": "cpu: schedule | prepare_inputs | d2h_copy | update_from_output; gpu: forward (a "
    "deferred step's wait for its sampling release is idle, not busy)",
    "start": "s",
    "end": "s",
    "step": "step id the interval belongs to (-1: none)",
}

# Long table (only with RunConfig.record_itl): one row per delivered output token.
ITL_COLUMNS: dict[str, str] = {
    "request_id": "request id",
    "token_index": "0-based output position",
    "time": "s, when it was delivered",
    "itl": "s, gap to the previous token of the request (the first token's is its TTFT)",
}

# vLLM's benchmark latency figures: mean, median and p99 of TTFT, TPOT, ITL and E2EL, in ms.
LATENCY_KEYS: tuple[str, ...] = tuple(
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p99")
)

# Keys every summary has (plus goodput and any extra figures).
SUMMARY_KEYS: tuple[str, ...] = (
    "num_requests",
    "num_finished",
    "num_aborted",
    "num_unfinished",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *LATENCY_KEYS,
    "mean_queueing_ms",
    "mean_hol_blocking_ms",
    "request_goodput",
    "gpu_busy_s",
    "cpu_busy_s",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "num_preemptions",
    "num_pauses",
    "preemption_rate",
    "pause_rate",
    "recomputed_tokens",
    "truncated_tokens",
    "mean_kv_usage",
    "max_kv_usage",
    "num_steps",
    "sim_wall_s",
    "recomputed_share",
    "preemptions_per_1k_steps",
    "preemptions_per_request",
    "pauses_per_1k_steps",
    "pauses_per_request",
    "prefix_cache_hit_rate",
)


@dataclass
class RunResult:
    """What `schedsim.run.simulate` returns; every table's columns are documented above."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]
    config: dict[str, Any]
    itl: pd.DataFrame | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, pd.DataFrame]:
        """The non-empty tables by name (for writers)."""
        out = {"requests": self.requests, "steps": self.steps, "timeline": self.timeline}
        if self.itl is not None:
            out["itl"] = self.itl
        return out
