"""Resolve a RunConfig into the concrete pieces of a run: specs, KV pool, models, policy options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from schedsim.latency import make_cpu_cost_model, make_latency_model
from schedsim.latency.memory import kv_pool_blocks
from schedsim.latency.specs import get_model_spec
from schedsim.policies import get_policy_info, load_plugins, make_policy
from schedsim.policies.routers import make_router
from schedsim.run.config import RunConfig
from schedsim.run.toml_config import ConfigError

# RunConfig fields forwarded to the policy's SchedulerConfig when the policy has them.
POLICY_FIELDS = (
    "block_size",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "scheduling_policy",
    "num_spec_tokens",
    "spec_method",
)


def make_latency(cfg: RunConfig) -> Any:
    """The GPU step-time model from schedsim.latency, calibrated when the config names a file."""
    return make_latency_model(
        cfg.model, cfg.gpu, cfg.tp, cfg.latency_model, calibration=cfg.latency_calibration
    )


def make_draft_latency(cfg: RunConfig) -> Any:
    """The draft model's step-time model on the same GPU, or None when drafting is not timed."""
    if cfg.draft_model is None:
        return None
    return make_latency_model(cfg.draft_model, cfg.gpu, cfg.tp, cfg.latency_model)


def make_cpu_model(cfg: RunConfig) -> Any:
    """The CPU phase-cost model (a `calibrate --cpu` file, else the engine's host terms), scaled."""
    return make_cpu_cost_model(
        cfg.gpu, cfg.tp, cfg.latency_calibration, cpu_cost_file=cfg.cpu_cost_file, scale=cfg.cpu_cost_scale
    )


@dataclass
class ResolvedRun:
    """Everything a run needs, with every default filled in."""

    config: RunConfig
    policy_options: dict[str, Any]
    num_gpu_blocks: int
    max_model_len: int
    latency_model: Any
    cpu_model: Any

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the config, the resolved values and the models' descriptions."""
        out = self.config.to_dict()
        out.update(
            num_gpu_blocks=self.num_gpu_blocks,
            max_model_len=self.max_model_len,
            resolved_policy_options=dict(self.policy_options),
            latency_model_description=self.latency_model.describe(),
            cpu_model_description=self.cpu_model.describe(),
        )
        return out


def policy_options(cfg: RunConfig, num_gpu_blocks: int, max_model_len: int) -> dict[str, Any]:
    """RunConfig's scheduler fields merged into policy_options (conflicts are errors)."""
    load_plugins(cfg.plugins)
    info = get_policy_info(cfg.policy)
    known = {f.name: f for f in dataclasses.fields(info.config_cls)}
    clash = sorted(set(cfg.policy_options) & set(POLICY_FIELDS))
    if clash:
        raise ValueError(
            f"RunConfig.policy_options: set {clash} as RunConfig field(s), not as policy options"
        )
    values = {name: getattr(cfg, name) for name in POLICY_FIELDS}
    values.update(num_gpu_blocks=num_gpu_blocks, max_model_len=max_model_len)
    chunked = values["enable_chunked_prefill"]
    if chunked is None and "enable_chunked_prefill" in known:
        chunked = known["enable_chunked_prefill"].default
    if chunked is False and values["max_num_batched_tokens"] is None:
        values["max_num_batched_tokens"] = max(max_model_len, 2048)  # vLLM's rule without chunking
    opts = {k: v for k, v in values.items() if v is not None and k in known}
    if cfg.num_spec_tokens and "num_spec_tokens" not in known:
        raise ValueError(f"RunConfig.num_spec_tokens: policy {cfg.policy!r} has no speculative decoding")
    opts.update(cfg.policy_options)
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ValueError(
            f"RunConfig.policy_options: policy {cfg.policy!r} has no option(s) {unknown}; "
            f"known: {sorted(known)}"
        )
    info.config_cls(**opts)  # the policy's own validation, naming its field
    return opts


def resolve_run(cfg: RunConfig) -> ResolvedRun:
    """Fill in the KV pool, max_model_len, latency and CPU models for a config."""
    spec = get_model_spec(cfg.model)
    max_model_len = cfg.max_model_len or spec.max_position_embeddings
    blocks = cfg.num_gpu_blocks
    if blocks is None:
        blocks = kv_pool_blocks(cfg.model, cfg.gpu, cfg.tp, cfg.block_size, cfg.gpu_memory_utilization)
    opts = policy_options(cfg, blocks, max_model_len)
    return ResolvedRun(cfg, opts, blocks, max_model_len, make_latency(cfg), make_cpu_model(cfg))


def check_config(config: RunConfig, label: str = "config") -> None:
    """Resolve specs and build the policy up front, so a bad name fails before any simulation."""
    try:
        resolved = resolve_run(config)
        make_policy(config.policy, **resolved.policy_options)
        if config.replicas > 1 or config.replica_overrides:
            make_router(config.router, **config.router_options)
            for i in range(len(config.replica_overrides)):
                replica = resolve_run(config.replica_config(i))
                make_policy(replica.config.policy, **replica.policy_options)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{label}: {exc.args[0] if exc.args else exc}") from None
