"""ModelConfig: a Llama-style decoder sized by a Hugging Face `config.json`, plus shipped presets."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

# HF keys we read; anything else in a config.json (architectures, bos ids, ...) is ignored.
_HF_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "torch_dtype",
)
_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-style model, named as in Hugging Face's LlamaConfig."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    torch_dtype: str = "float32"
    source: str = "<dict>"  # file the config came from, for error messages

    def __post_init__(self) -> None:
        """Reject shapes the kernels cannot run, naming the field and the source file."""
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{self.source}: {name} must be >= 1, got {getattr(self, name)}")
        if self.head_dim == 0:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"{self.source}: hidden_size {self.hidden_size} is not divisible by "
                    f"num_attention_heads {self.num_attention_heads}; set head_dim"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"{self.source}: head_dim must be even and >= 2 (rotary), got {self.head_dim}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{self.source}: num_attention_heads {self.num_attention_heads} must be a "
                f"multiple of num_key_value_heads {self.num_key_value_heads}"
            )
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError(f"{self.source}: rms_norm_eps and rope_theta must be > 0")
        if self.torch_dtype not in _DTYPES:
            raise ValueError(f"{self.source}: torch_dtype must be one of {_DTYPES}, got {self.torch_dtype!r}")

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head (grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def num_params(self) -> int:
        """Parameter count, for sizing messages and the roofline model."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        attn = h * d * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        layer = attn + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + emb + h

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> ModelConfig:
        """Build from a config.json-style dict; wrong types are reported with the key's name."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: a model config must be a JSON object, got {type(data).__name__}")
        kinds = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {"source": source}
        for key in _HF_KEYS:
            if key not in data or data[key] is None:
                continue
            value = data[key]
            kind = kinds[key]
            ok = (
                isinstance(value, bool)
                if kind == "bool"
                else isinstance(value, str)
                if kind == "str"
                else isinstance(value, (int, float)) and not isinstance(value, bool)
            )
            if not ok or (kind == "int" and int(value) != value):
                raise ValueError(f"{source}: field {key!r} must be {kind}, got {value!r}")
            kwargs[key] = int(value) if kind == "int" else float(value) if kind == "float" else value
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """Read a config.json (or a checkpoint folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The config.json form (what `from_dict` reads back)."""
        return {k: getattr(self, k) for k in _HF_KEYS} | {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
        }


# Shipped sizes: `tiny` runs a few dozen requests on a CPU in seconds; `small` is for a GPU sweep.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    ),
    "mini": dict(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=8192,
    ),
    "small": dict(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=8192,
    ),
    "llama-1b": dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    ),
}


def load_model_config(name_or_path: str | Path) -> ModelConfig:
    """A preset by name (`tiny`, `mini`, `small`, `llama-1b`) or a config.json path."""
    if str(name_or_path) in PRESETS:
        return ModelConfig.from_dict(PRESETS[str(name_or_path)], source=f"preset {name_or_path}")
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(f"unknown model {name_or_path!r}: not a preset {sorted(PRESETS)} nor a file")
    return ModelConfig.from_file(path)
