"""Model and GPU specs: the shapes and datasheet numbers every latency model starts from."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any


def _positive(obj: object, names: tuple[str, ...]) -> None:
    """Reject non-positive numbers, naming the offending field (specs come from user JSON)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise ValueError(
                f"{type(obj).__name__} {getattr(obj, 'name', '?')!r}: "
                f"field {name!r} must be a positive number, got {value!r}"
            )


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape: enough to count FLOPs, weight bytes and KV bytes."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int = 2
    max_position_embeddings: int = 4096
    tp: int = 1
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    hf_name: str = ""
    vidur_name: str = ""

    def __post_init__(self) -> None:
        _positive(
            self,
            (
                "num_layers",
                "hidden_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "dtype_bytes",
                "max_position_embeddings",
                "tp",
            ),
        )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"ModelSpec {self.name!r}: field 'num_key_value_heads' "
                f"({self.num_key_value_heads}) must divide num_attention_heads "
                f"({self.num_attention_heads})"
            )

    @property
    def q_size(self) -> int:
        """Width of the query projection output."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of the K / V projection outputs."""
        return self.num_key_value_heads * self.head_dim

    def layer_weight_params(self) -> int:
        """Parameters of one transformer layer (attention + MLP + two norms)."""
        h = self.hidden_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        return attn + mlp + 2 * h

    def weight_params(self) -> int:
        """All parameters: layers, embedding, LM head (unless tied) and the final norm."""
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return self.num_layers * self.layer_weight_params() + emb + head + self.hidden_size

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each rank stores; vLLM replicates KV heads when tp exceeds their number."""
        return max(1, math.ceil(self.num_key_value_heads / tp))

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV-cache bytes one token occupies on one GPU, all layers."""
        return 2 * self.num_layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for config JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: datasheet peaks plus the efficiency priors the roofline applies to them."""

    name: str
    memory_gib: float
    peak_tflops: float  # dense BF16 tensor-core TFLOP/s
    hbm_gbps: float  # HBM / GDDR bandwidth, GB/s (1e9 bytes)
    nvlink_gbps: float  # per-GPU interconnect bandwidth, GB/s (bidirectional, datasheet)
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8
    kernel_overhead_us: float = 4.0
    comm_latency_us: float = 10.0
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _positive(
            self,
            (
                "memory_gib",
                "peak_tflops",
                "hbm_gbps",
                "nvlink_gbps",
                "compute_efficiency",
                "memory_efficiency",
            ),
        )
        for name in ("compute_efficiency", "memory_efficiency"):
            if getattr(self, name) > 1.0:
                raise ValueError(f"GpuSpec {self.name!r}: field {name!r} must be <= 1")
        for name in ("kernel_overhead_us", "comm_latency_us"):
            if getattr(self, name) < 0:
                raise ValueError(f"GpuSpec {self.name!r}: field {name!r} must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for config JSON."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["aliases"] = list(self.aliases)
        return d


def _load_json(name: str) -> dict[str, dict[str, Any]]:
    """A shipped data file, without its comment keys."""
    text = resources.files("schedsim.latency").joinpath("data", name).read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def _build(cls: type, name: str, raw: dict[str, Any], where: str) -> Any:
    """Build a spec from a dict, naming the file and the unknown field on bad input."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{where}: {name!r} has unknown field(s) {unknown}")
    raw = dict(raw)
    if "aliases" in raw:
        raw["aliases"] = tuple(raw["aliases"])
    try:
        return cls(name=name, **raw)
    except TypeError as exc:
        raise ValueError(f"{where}: {name!r}: {exc}") from exc


@lru_cache(maxsize=1)
def _models() -> dict[str, ModelSpec]:
    return {k: _build(ModelSpec, k, v, "models.json") for k, v in _load_json("models.json").items()}


@lru_cache(maxsize=1)
def _gpus() -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    for k, v in _load_json("gpus.json").items():
        spec = _build(GpuSpec, k, v, "gpus.json")
        for key in (k, *spec.aliases):
            out[key] = spec
    return out


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def list_model_specs() -> list[str]:
    """Names of the shipped model specs."""
    return sorted(_models())


def list_gpu_specs() -> list[str]:
    """Canonical names of the shipped GPU specs (aliases resolve too)."""
    return sorted({s.name for s in _gpus().values()})


def get_model_spec(name: str | ModelSpec) -> ModelSpec:
    """A shipped spec by name or HF id, or one read from a Hugging Face config.json path."""
    if isinstance(name, ModelSpec):
        return name
    models = _models()
    key = _norm(name)
    if key in models:
        return models[key]
    for spec in models.values():
        if key in (spec.hf_name.lower(), spec.vidur_name.lower()) and key:
            return spec
    path = Path(name)
    if path.suffix == ".json" or path.is_dir():
        return model_spec_from_hf_config(path)
    raise KeyError(
        f"unknown model {name!r}; shipped: {list_model_specs()} "
        f"(or pass a path to a Hugging Face config.json)"
    )


def get_gpu_spec(name: str | GpuSpec) -> GpuSpec:
    """A shipped GPU spec by name or alias."""
    if isinstance(name, GpuSpec):
        return name
    gpus = _gpus()
    key = _norm(name)
    if key not in gpus:
        raise KeyError(f"unknown gpu {name!r}; shipped: {list_gpu_specs()}")
    return gpus[key]


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "fp8": 1}


def model_spec_from_hf_config(path: str | Path, tp: int = 1) -> ModelSpec:
    """Read a Hugging Face config.json (file or folder holding one) into a ModelSpec."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a Hugging Face config.json: {exc}") from exc

    def need(*keys: str) -> Any:
        for key in keys:
            if key in cfg:
                return cfg[key]
        raise ValueError(f"{path}: missing field {keys[0]!r}")

    heads = int(need("num_attention_heads", "n_head"))
    hidden = int(need("hidden_size", "n_embd"))
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu")))
    return ModelSpec(
        name=str(cfg.get("_name_or_path") or path.parent.name or "hf-model"),
        num_layers=int(need("num_hidden_layers", "n_layer")),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(cfg.get("intermediate_size") or 4 * hidden),
        vocab_size=int(need("vocab_size")),
        dtype_bytes=_DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        tp=tp,
        gated_mlp="gelu" not in act,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
