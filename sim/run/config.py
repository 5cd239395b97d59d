"""RunConfig: every knob of one simulated run, in one flat dataclass the CLI and TOML loader read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from schedsim.cluster.interconnect import get_interconnect
from schedsim.run.fieldtypes import check_instance

ENGINE_MODES = ("auto", "sync", "async")
SPEC_METHODS = ("draft_model", "ngram")
# what may differ between the replicas of a cluster (the workload and its block hashes may not)
REPLICA_FIELDS = (
    "policy",
    "policy_options",
    "engine",
    "batch_queue_depth",
    "model",
    "gpu",
    "tp",
    "latency_model",
    "cpu_cost_scale",
    "latency_calibration",
    "cpu_cost_file",
    "num_gpu_blocks",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "scheduling_policy",
)


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with a help string (the CLI turns it into a documented flag)."""
    if isinstance(default, (dict, list)):

        def fresh() -> Any:
            """A copy per instance: a dict or list default is never shared."""
            return type(default)(default)

        return field(default_factory=fresh, metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class RunConfig:
    """One run: workload, policy, hardware, models and the oracle's fault plan."""

    # ---- what runs ----
    policy: str = _f("vllm-async", "registered policy name (see `schedsim policies`)")
    policy_options: dict[str, Any] = _f(
        {}, "extra keyword options for the policy's config (a field of its SchedulerConfig subclass)"
    )
    plugins: list[str] = _f(
        [],
        "modules imported before the policy is looked up; their import registers policies "
        "(installed plugins load by themselves, through the schedsim.policies entry points)",
    )
    engine: str = _f(
        "auto",
        "engine loop: auto (follow policy.max_concurrent_batches), sync "
        "(EngineCore.step) or async (step_with_batch_queue)",
    )
    batch_queue_depth: int | None = _f(
        None, "batches in flight for the async engine (None: policy.max_concurrent_batches, at least 2)"
    )
    # ---- workload ----
    trace: str = _f(
        "azure-conv-2023",
        "workload: a shipped trace name, a trace file path or a "
        "generator spec understood by schedsim.traces.load_workload",
    )
    trace_sort: bool = _f(
        False, "sort the trace's rows by arrival time instead of failing on decreasing timestamps"
    )
    trace_skip_bad: bool = _f(
        False, "skip malformed trace rows (a warning gives their count and first line numbers)"
    )
    rate: float | None = _f(None, "rescale arrivals to this many requests per second (None: as traced)")
    max_requests: int | None = _f(None, "replay only the first N requests (None: all)")
    seed: int = _f(0, "seed of every random draw (synthetic tokens, draft acceptance, faults)")
    # ---- hardware and models ----
    model: str = _f("llama-3.1-8b", "model spec name (see `schedsim models`)")
    gpu: str = _f("h100-sxm", "GPU spec name (see `schedsim gpus`)")
    tp: int = _f(1, "tensor-parallel degree")
    latency_model: str = _f("auto", "GPU step-time model kind: auto, roofline, table or fitted")
    cpu_cost_scale: float = _f(1.0, "multiplier on every modelled CPU phase time (0 disables CPU cost)")
    latency_calibration: str | None = _f(
        None,
        "calibration file written by `schedsim calibrate` (None: the shipped profiles and fitted "
        "roofline); it must have been fitted for this run's model, GPU and TP",
    )
    force_calibration: bool = _f(
        False,
        "apply latency_calibration even though it was fitted for another model, GPU or TP "
        "(config.json records the mismatch)",
    )
    cpu_cost_file: str | None = _f(
        None,
        "CPU phase costs from a file (None: the engine's host terms); `schedsim calibrate --cpu` "
        "writes one that times schedsim's own policy code, not an engine's",
    )
    # ---- scheduler and KV cache (None: the policy's own default) ----
    block_size: int = _f(16, "KV cache block size in tokens")
    num_gpu_blocks: int | None = _f(
        None,
        "KV pool size in blocks, null block included "
        "(None: derived from GPU memory, weights and utilisation)",
    )
    gpu_memory_utilization: float = _f(0.9, "fraction of GPU memory the engine may use")
    max_num_seqs: int | None = _f(None, "max requests per step (None: policy default)")
    max_num_batched_tokens: int | None = _f(None, "token budget per step (None: policy default)")
    max_model_len: int | None = _f(None, "max prompt+output length (None: the model's context length)")
    enable_prefix_caching: bool | None = _f(None, "prefix caching on/off (None: policy default)")
    enable_chunked_prefill: bool | None = _f(None, "chunked prefill on/off (None: policy default)")
    scheduling_policy: str | None = _f(None, "fcfs or priority (None: policy default)")
    max_tokens_source: str = _f(
        "output",
        "max_tokens of requests whose trace row has none: 'output' "
        "(the row's output length, as `vllm bench serve` sends it) "
        "or 'cap' (max_tokens_cap; EOS stops them at their length)",
    )
    max_tokens_cap: int | None = _f(
        None, "max_tokens when max_tokens_source='cap' (None: max_model_len - prompt)"
    )
    # ---- speculative decoding (oracle) ----
    num_spec_tokens: int = _f(0, "draft tokens proposed per decode step (0: no speculative decoding)")
    spec_acceptance_rate: float = _f(0.7, "probability that each draft token is accepted (seeded draws)")
    spec_method: str = _f(
        "draft_model",
        "proposer of the drafts: draft_model (a model of its own: one "
        "more input slot per scheduled request and num_spec_tokens KV "
        "lookahead slots in vLLM's scheduler) or ngram (prompt lookup on "
        "the CPU; sync vLLM only)",
    )
    draft_model: str | None = _f(
        None,
        "model spec of the draft model whose passes (the step's tokens "
        "plus one slot per request, then num_spec_tokens - 1 one-token "
        "passes) add to each step's GPU time (None: drafting is free)",
    )
    structured_fraction: float = _f(
        0.0,
        "fraction of requests (seeded draw) that use structured output, "
        "on top of the trace's structured_output column (vllm, vllm-async)",
    )
    # ---- fault plan (oracle) ----
    abort_times: dict[str, float] = _f({}, "request_id = time (s): the client aborts that request then")
    abort_fraction: float = _f(0.0, "fraction of requests the client aborts at a seeded time")
    abort_window_s: float = _f(10.0, "seeded aborts happen uniformly within this many seconds of arrival")
    kv_load_failures: list[str] = _f([], "request ids whose KV load fails in their first scheduled step")
    kv_load_failure_fraction: float = _f(0.0, "fraction of requests whose first KV load fails (seeded)")
    # ---- metrics ----
    slo_ttft_ms: float | None = _f(None, "TTFT SLO for goodput (None: not constrained)")
    slo_tpot_ms: float | None = _f(None, "TPOT SLO for goodput (None: not constrained)")
    slo_e2el_ms: float | None = _f(None, "end-to-end latency SLO for goodput (None: not constrained)")
    record_itl: bool = _f(False, "also build the long per-token table RunResult.itl")
    max_sim_time: float | None = _f(None, "stop the simulation at this simulated time in s (None: run out)")
    # ---- cluster ----
    replicas: int = _f(1, "engine replicas behind the router (1: a single engine, no router)")
    router: str = _f("round-robin", "registered router name (see `schedsim routers`), for replicas > 1")
    router_options: dict[str, Any] = _f({}, "extra keyword options for the router's config")
    scrape_interval_s: float = _f(
        0.0, "the router reads replica metrics every this many s (0: live at each arrival)"
    )
    replica_overrides: list[dict[str, Any]] = _f(
        [],
        "per-replica settings for a heterogeneous fleet: entry i overrides fields of replica i "
        f"(any of {', '.join(REPLICA_FIELDS)})",
    )
    pd: str | None = _f(
        None,
        "prefill/decode disaggregation: P:D prefill and decode replicas, each pool behind its "
        "router (None: colocated replicas)",
    )
    interconnect: str = _f(
        "ib-400g",
        "the link KV transfers take from a prefill to a decode replica: nvlink, ib-400g, ib-200g, "
        "rdma-400g, rdma-200g, pcie-gen5, pcie-gen4, eth-100g or custom:GBPS:US",
    )
    prefill_router: str | None = _f(None, "the prefill pool's router with pd (None: router)")
    decode_router: str | None = _f(None, "the decode pool's router with pd (None: router)")
    # ---- simulator ----
    fast_forward: bool = _f(
        True,
        "jump over steady decode stretches in closed form (exact: same "
        "tables as step by step; docs/performance.md)",
    )

    def __post_init__(self) -> None:
        """Reject impossible values, naming the field."""
        check_instance(self)  # types first: the range checks below compare numbers
        self._check_positive()
        self._check_ranges()
        if self.engine not in ENGINE_MODES:
            raise ValueError(f"RunConfig.engine must be one of {ENGINE_MODES}, got {self.engine!r}")
        if self.max_tokens_source not in ("output", "cap"):
            raise ValueError(
                f"RunConfig.max_tokens_source must be 'output' or 'cap', got {self.max_tokens_source!r}"
            )
        if self.scheduling_policy not in (None, "fcfs", "priority"):
            raise ValueError(
                f"RunConfig.scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}"
            )
        if not isinstance(self.policy_options, dict):
            raise ValueError("RunConfig.policy_options must be a mapping of option name to value")
        self._check_cluster()
        for rid, t in self.abort_times.items():
            if not isinstance(t, (int, float)) or t < 0:
                raise ValueError(f"RunConfig.abort_times[{rid!r}] must be a time >= 0, got {t!r}")

    def _check_cluster(self) -> None:
        """Replica count, router knobs and per-replica overrides."""
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"RunConfig.replicas must be an integer >= 1, got {self.replicas!r}")
        if not isinstance(self.router_options, dict):
            raise ValueError("RunConfig.router_options must be a mapping of option name to value")
        if not self.scrape_interval_s >= 0:
            raise ValueError(f"RunConfig.scrape_interval_s must be >= 0, got {self.scrape_interval_s!r}")
        pools = self.pd_pools()
        if pools is not None and self.replicas not in (1, sum(pools)):
            raise ValueError(
                f"RunConfig.replicas ({self.replicas}) contradicts pd {self.pd!r} "
                f"({sum(pools)} replicas); give one of them"
            )
        try:
            get_interconnect(self.interconnect)
        except ValueError as exc:
            raise ValueError(f"RunConfig.interconnect: {exc}") from None
        if len(self.replica_overrides) > self.num_replicas():
            raise ValueError(
                f"RunConfig.replica_overrides has {len(self.replica_overrides)} entries for "
                f"{self.num_replicas()} replicas"
            )
        for i, entry in enumerate(self.replica_overrides):
            if not isinstance(entry, dict):
                raise ValueError(f"RunConfig.replica_overrides[{i}] must be a table of field = value")
            bad = sorted(set(entry) - set(REPLICA_FIELDS))
            if bad:
                raise ValueError(
                    f"RunConfig.replica_overrides[{i}]: {bad} cannot differ between replicas; "
                    f"allowed: {', '.join(REPLICA_FIELDS)}"
                )

    def _check_positive(self) -> None:
        """Counts that must be >= 1 (optional ones only when given)."""
        for name in ("tp", "block_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"RunConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in (
            "max_requests",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "max_tokens_cap",
            "batch_queue_depth",
        ):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"RunConfig.{name} must be None or an integer >= 1, got {v!r}")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 2:
            raise ValueError(
                f"RunConfig.num_gpu_blocks must be None or >= 2 (block 0 is the null "
                f"block), got {self.num_gpu_blocks}"
            )
        for name in ("rate", "slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms", "max_sim_time"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"RunConfig.{name} must be None or > 0, got {v!r}")

    def _check_ranges(self) -> None:
        """Fractions, scales and counts with bounded ranges."""
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"RunConfig.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        for name in (
            "spec_acceptance_rate",
            "abort_fraction",
            "kv_load_failure_fraction",
            "structured_fraction",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"RunConfig.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.cpu_cost_scale < 0:
            raise ValueError(f"RunConfig.cpu_cost_scale must be >= 0, got {self.cpu_cost_scale}")
        if self.abort_window_s <= 0:
            raise ValueError(f"RunConfig.abort_window_s must be > 0, got {self.abort_window_s}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"RunConfig.seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.num_spec_tokens, int) or self.num_spec_tokens < 0:
            raise ValueError(
                f"RunConfig.num_spec_tokens must be an integer >= 0, got {self.num_spec_tokens!r}"
            )
        if self.spec_method not in SPEC_METHODS:
            raise ValueError(f"RunConfig.spec_method must be one of {SPEC_METHODS}, got {self.spec_method!r}")
        if self.draft_model is not None and (self.spec_method != "draft_model" or not self.num_spec_tokens):
            raise ValueError("RunConfig.draft_model needs num_spec_tokens > 0 and spec_method 'draft_model'")

    def pd_pools(self) -> tuple[int, int] | None:
        """(prefill replicas, decode replicas) of a disaggregated cluster; None when colocated."""
        if self.pd is None:
            return None
        parts = self.pd.split(":")
        try:
            p, d = (int(x) for x in parts)
        except ValueError:
            raise ValueError(f"RunConfig.pd must be P:D (two integers >= 1), got {self.pd!r}") from None
        if p < 1 or d < 1:
            raise ValueError(f"RunConfig.pd must be P:D (two integers >= 1), got {self.pd!r}")
        return p, d

    def num_replicas(self) -> int:
        """Replicas in the cluster: P + D with pd, else `replicas`."""
        pools = self.pd_pools()
        return self.replicas if pools is None else pools[0] + pools[1]

    def replica_config(self, index: int) -> RunConfig:
        """Replica `index`'s own config in a cluster: this one with that replica's overrides."""
        over = self.replica_overrides[index] if index < len(self.replica_overrides) else {}
        return dataclasses.replace(self, replicas=1, replica_overrides=[], pd=None, **over)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready data."""
        return dataclasses.asdict(self)
