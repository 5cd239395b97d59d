"""Model dtypes by name, and the default per device: bf16 on CUDA (the tensor-core path the
kernels are built for), fp32 on a CPU (the torch references at full precision)."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def canonical_dtype(name: str) -> str:
    """The config.json spelling of a dtype name or its short alias (fp32, fp16, bf16)."""
    full = ALIASES.get(name, name)
    if full not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: use one of {sorted(ALIASES)} or {sorted(DTYPES)}")
    return full


def resolve_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """The dtype asked for, or the device's default when none is (bf16 on CUDA, fp32 on CPU)."""
    if name is not None:
        return DTYPES[canonical_dtype(name)]
    return torch.bfloat16 if device.type == "cuda" else torch.float32
