"""One interface over the kernels: `TorchOps` (references) and `TritonOps` (compiled or interpreted)."""

from __future__ import annotations

import importlib
import os
from typing import Protocol

import torch

from . import reference as ref
from .metadata import AttentionMetadata


class Ops(Protocol):
    """The five kernels the model calls; both implementations share these signatures."""

    name: str

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rotary(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor: ...

    def store_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None: ...

    def paged_attention(
        self,
        q: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor: ...


class TorchOps:
    """The torch references: the CPU execution path."""

    name = "torch"
    rms_norm = staticmethod(ref.rms_norm_ref)
    rotary = staticmethod(ref.rotary_ref)
    silu_and_mul = staticmethod(ref.silu_and_mul_ref)
    store_kv = staticmethod(ref.store_kv_ref)
    paged_attention = staticmethod(ref.paged_attention_ref)


class TritonOps:
    """The Triton kernels; index checks run on host tensors only (a device check would sync)."""

    name = "triton"

    def __init__(self) -> None:
        self._attn = importlib.import_module(f"{__package__}.triton_attention")
        self._elem = importlib.import_module(f"{__package__}.triton_elementwise")
        self.tuning = self._attn.DEFAULT_TUNING  # attention block shapes and split rule

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused add + RMSNorm kernel."""
        return self._elem.rms_norm(x, weight, eps, residual)

    def rotary(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In-place rotary kernel."""
        return self._elem.rotary(positions, q, k, cos_sin)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """SwiGLU gate kernel."""
        return self._elem.silu_and_mul(x)

    def store_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """KV store kernel; slots are checked when they are host tensors."""
        self._elem.store_kv(
            key, value, key_cache, value_cache, slot_mapping, validate=slot_mapping.device.type == "cpu"
        )

    def paged_attention(
        self,
        q: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Mixed-batch paged attention kernel; block tables are checked when on the host."""
        return self._attn.paged_attention(
            q,
            key_cache,
            value_cache,
            meta,
            scale,
            validate=meta.block_tables.device.type == "cpu",
            tuning=self.tuning,
        )


def triton_status() -> tuple[bool, str]:
    """(usable, why): Triton compiles on CUDA, or runs interpreted on a CPU when TRITON_INTERPRET=1."""
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising anything else
        return False, f"triton is not importable: {exc}"
    if torch.cuda.is_available():
        return True, "triton compiles for CUDA"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True, "triton runs in its CPU interpreter (TRITON_INTERPRET=1)"
    return False, "no CUDA device and TRITON_INTERPRET is not 1 (set it before importing the kernels)"


def get_ops(kind: str = "auto") -> Ops:
    """`torch`, `triton`, or `auto` (Triton on CUDA, the torch references on a CPU)."""
    if kind == "auto":
        kind = "triton" if torch.cuda.is_available() and triton_status()[0] else "torch"
    if kind == "torch":
        return TorchOps()
    if kind == "triton":
        ok, why = triton_status()
        if not ok:
            raise RuntimeError(f"ops 'triton' unavailable: {why}")
        return TritonOps()
    raise ValueError(f"ops must be 'auto', 'torch' or 'triton', got {kind!r}")
