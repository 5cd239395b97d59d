"""Resolve a RunConfig into the concrete pieces of a run: specs, KV pool, models, policy options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from schedsim.latency import make_cpu_cost_model, make_latency_model
from schedsim.latency.factory import read_calibration
from schedsim.latency.memory import kv_pool_blocks
from schedsim.latency.specs import ModelSpec, get_gpu_spec, get_model_spec
from schedsim.policies import SupportsKVTransfer, get_policy_info, load_plugins, make_policy
from schedsim.policies.routers import make_router
from schedsim.policies.trtllm import TrtllmConfig
from schedsim.policies.vllm import VllmConfig
from schedsim.run.config import RunConfig
from schedsim.run.features import check_structured_fraction
from schedsim.run.fieldtypes import check_fields, field_error
from schedsim.run.toml_config import ConfigError, to_jsonable

# Engines whose KV block size must be a power of two: vLLM's --block-size choices (1, 8, ..., 256)
# and TensorRT-LLM's tokens_per_block (its build asserts it). Small powers (2, 4) stay allowed
# for small hand-made scenarios.
POWER_OF_TWO_BLOCKS: dict[type, str] = {VllmConfig: "vLLM", TrtllmConfig: "TensorRT-LLM"}

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
    calibration: dict[str, Any] | None = None  # calibration_match(): what the file was fitted for

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the config, the resolved values and the models' descriptions."""
        out = self.config.to_dict()
        out.update(
            num_gpu_blocks=self.num_gpu_blocks,
            max_model_len=self.max_model_len,
            resolved_policy_options=dict(self.policy_options),
            policy_config=to_jsonable(get_policy_info(self.config.policy).config_cls(**self.policy_options)),
            latency_model_description=self.latency_model.describe(),
            cpu_model_description=self.cpu_model.describe(),
        )
        if self.calibration is not None:
            out["latency_calibration_match"] = self.calibration
        return out


# What a calibration file records about the deployment it was fitted for, and its flag.
CALIBRATION_KEYS = ("model", "gpu", "tp")
FORCE_FLAG = "--force-calibration (TOML: force_calibration = true)"
ANY = "any"  # a roofline fit's per-GPU factors hold for every model and TP


def calibration_match(cfg: RunConfig) -> dict[str, Any] | None:
    """What the run's latency calibration was fitted for against the run; a calibration fitted
    for another model, GPU or TP (or one that does not say) is refused unless forced."""
    if cfg.latency_calibration is None:
        return None
    return match_calibration(
        cfg.latency_calibration,
        cfg.model,
        cfg.gpu,
        cfg.tp,
        cfg.force_calibration,
        "RunConfig.latency_calibration",
    )


def match_calibration(
    path: str, model: str, gpu: str, tp: int, force: bool, owner: str, flag: str = FORCE_FLAG
) -> dict[str, Any]:
    """A calibration file's deployment against the one it is applied to: the comparison, or a
    ValueError naming `owner` and each difference unless `force`."""
    cal = read_calibration(path)
    run = {"model": get_model_spec(model).name, "gpu": get_gpu_spec(gpu).name, "tp": tp}
    fitted = {k: cal.get(k) for k in (*CALIBRATION_KEYS, "engine")}
    if cal.get("kind") == "roofline-fit":  # per-GPU factors: any model or TP, the GPUs it holds
        fitted.update(model=ANY, tp=ANY, gpu=sorted(cal.get("gpus", {})))
    differ = [k for k in CALIBRATION_KEYS if not _same(k, fitted[k], run[k])]
    if differ and not force:
        said = "; ".join(
            f"it does not record its {k} (this run: {run[k]!r})"
            if fitted[k] is None
            else f"it was fitted for {k} {fitted[k]!r} (this run: {run[k]!r})"
            for k in differ
        )
        raise ValueError(f"{owner}: {path}: {said}; use a calibration of this deployment or pass {flag}")
    return {"fitted_for": fitted, "run": run, "mismatch": differ, "forced": bool(differ)}


def _same(key: str, fitted: Any, run: Any) -> bool:
    """Whether a calibration's recorded value names the run's (model and GPU by canonical name)."""
    if fitted is None:
        return False
    if fitted == ANY:
        return True
    if key == "gpu" and isinstance(fitted, list):
        return run in fitted
    if key in ("model", "gpu"):
        get = get_model_spec if key == "model" else get_gpu_spec
        try:
            return bool(get(str(fitted)).name == run)
        except (KeyError, ValueError):
            return str(fitted) == run
    return bool(fitted == run)


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
    check_fields(info.config_cls, cfg.policy_options, prefix="policy_options.")
    check_block_size(info.config_cls, cfg.block_size)
    info.config_cls(**opts)  # the policy's own validation, naming its field
    return opts


def _pool_hint(cfg: RunConfig, blocks: int, max_model_len: int) -> str:
    """How to fit a KV pool too small for one max_model_len sequence (empty when it fits)."""
    fits = (blocks - 1) * cfg.block_size
    if max_model_len <= fits:
        return ""
    origin = "" if cfg.max_model_len else f" (default: {cfg.model}'s context length)"
    return (
        f"; max_model_len is {max_model_len}{origin}: pass --max-model-len {fits} or less, "
        "or more --num-gpu-blocks"
    )


def check_block_size(config_cls: type, block_size: int) -> None:
    """An engine whose kernels need a power-of-two block size refuses any other."""
    engine = next((name for cls, name in POWER_OF_TWO_BLOCKS.items() if issubclass(config_cls, cls)), None)
    if engine is not None and block_size & (block_size - 1):
        raise field_error("block_size", f"{engine} needs a power of two (8, 16, 32, ...)", block_size)


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Tensor parallelism splits the attention heads evenly over the ranks (vLLM's check)."""
    if spec.num_attention_heads % tp:
        raise field_error("tp", f"must divide {spec.name}'s {spec.num_attention_heads} attention heads", tp)


def check_max_model_len(spec: ModelSpec, max_model_len: int | None) -> None:
    """No sequence longer than the model's context (vLLM's check, without its environment override)."""
    if max_model_len is not None and max_model_len > spec.max_position_embeddings:
        raise field_error(
            "max_model_len",
            f"more than {spec.name}'s context length of {spec.max_position_embeddings} tokens (vLLM "
            "refuses it too); a model config.json with a longer max_position_embeddings allows it",
            max_model_len,
        )


def resolve_run(cfg: RunConfig) -> ResolvedRun:
    """Fill in the KV pool, max_model_len, latency and CPU models for a config."""
    spec = get_model_spec(cfg.model)
    check_tp(spec, cfg.tp)
    check_max_model_len(spec, cfg.max_model_len)
    match = calibration_match(cfg)
    max_model_len = cfg.max_model_len or spec.max_position_embeddings
    blocks = cfg.num_gpu_blocks
    if blocks is None:
        blocks = kv_pool_blocks(cfg.model, cfg.gpu, cfg.tp, cfg.block_size, cfg.gpu_memory_utilization)
    try:
        opts = policy_options(cfg, blocks, max_model_len)
    except ValueError as exc:
        raise ValueError(f"{exc.args[0]}{_pool_hint(cfg, blocks, max_model_len)}") from None
    return ResolvedRun(cfg, opts, blocks, max_model_len, make_latency(cfg), make_cpu_model(cfg), match)


def check_pd_policy(policy: Any, index: int, name: str) -> None:
    """A prefill/decode pair's replica must run a policy that serves a side of one."""
    if not isinstance(policy, SupportsKVTransfer):
        raise ValueError(
            f"RunConfig.pd: replica {index}'s policy {name!r} does not serve a side of a "
            "prefill/decode pair (it declares no SupportsKVTransfer; the vllm and trtllm:* policies do)"
        )


def check_config(config: RunConfig, label: str = "") -> None:
    """Resolve specs and build the policy up front, so a bad name fails before any simulation;
    `label` names the run among several (a compare variant, a sweep point)."""
    try:
        resolved = resolve_run(config)
        policy = make_policy(config.policy, **resolved.policy_options)
        check_structured_fraction(config, policy)
        if config.num_replicas() > 1 or config.replica_overrides:
            pools = (config.prefill_router, config.decode_router)
            for name in dict.fromkeys([config.router, *(r for r in pools if r)]):
                make_router(name, **config.router_options)
            # (name, policy) of each replica: the base run's where no override applies
            replicas = [(config.policy, policy)] * config.num_replicas()
            for i in range(len(config.replica_overrides)):
                replica = resolve_run(config.replica_config(i))
                replicas[i] = (
                    replica.config.policy,
                    make_policy(replica.config.policy, **replica.policy_options),
                )
                check_structured_fraction(replica.config, replicas[i][1])
            if config.pd_pools() is not None:
                for i, (name, replica_policy) in enumerate(replicas):
                    check_pd_policy(replica_policy, i, name)
    except (ValueError, KeyError, TypeError) as exc:
        text = exc.args[0] if exc.args else exc
        raise ConfigError(f"{label}: {text}" if label else str(text)) from None
