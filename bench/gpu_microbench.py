"""Kernel microbenchmarks for bench/gpu_check.py: measured ceilings (HBM copy, bf16 GEMM), decode
attention bandwidth against the HBM ceiling, prefill attention throughput against torch's flash SDPA.

Every figure is bytes or FLOPs counted here, over a time from `triton.testing.do_bench` (median of
repeated launches after warm-up, L2 flushed between them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from schedsim.backend.kernels import AttentionMetadata
from schedsim.backend.kernels.launch import run_all
from schedsim.backend.kernels.triton_attention import DEFAULT_TUNING, plan_paged_attention


@dataclass(frozen=True)
class AttentionShape:
    """A batch of equal sequences: `seqs` sequences of `context` cached keys plus `new` query tokens."""

    seqs: int
    context: int
    new: int
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    page: int = 16

    def __post_init__(self) -> None:
        """Reject shapes no kernel runs."""
        sizes = (self.seqs, self.new, self.heads, self.kv_heads, self.head_dim, self.page)
        if min(sizes) < 1 or self.context < 0:
            raise ValueError(f"AttentionShape: sizes must be >= 1 (context >= 0), got {self}")
        if self.heads % self.kv_heads:
            raise ValueError(f"AttentionShape: heads {self.heads} not a multiple of kv_heads {self.kv_heads}")

    @property
    def seq_len(self) -> int:
        """Keys per sequence."""
        return self.context + self.new

    def kv_bytes(self, elem: int) -> int:
        """K and V bytes every sequence reads once (the decode kernel's compulsory traffic)."""
        return 2 * self.seqs * self.seq_len * self.kv_heads * self.head_dim * elem

    def io_bytes(self, elem: int) -> int:
        """KV read plus q read and output written."""
        return self.kv_bytes(elem) + 2 * self.seqs * self.new * self.heads * self.head_dim * elem

    def causal_flops(self) -> int:
        """4 * D per visible (query, key) pair per head: QK^T and PV, causal over the cached prefix."""
        pairs = self.new * self.context + self.new * (self.new + 1) // 2
        return 4 * self.head_dim * self.heads * self.seqs * pairs


def bench_ms(fn: Callable[[], Any], warmup: int = 5, rep: int = 20) -> float:
    """Median milliseconds of fn() on the GPU (warmup and rep are do_bench's budgets in ms)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def hbm_ceiling_gbs(gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth, counting bytes read and written (GB/s)."""
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


def gemm_ceiling_tflops(n: int = 8192) -> float:
    """bf16 n x n x n matrix product throughput (TFLOP/s)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = bench_ms(lambda: a @ b)
    return 2 * n**3 / ms / 1e9


def paged_inputs(shape: AttentionShape, dtype: torch.dtype, device: str = "cuda") -> tuple[Any, ...]:
    """q, caches and metadata of `shape`, pages shuffled through the block table."""
    pages = -(-shape.seq_len // shape.page)
    g = torch.Generator(device=device).manual_seed(0)
    blocks = torch.randperm(shape.seqs * pages, device=device, generator=g).to(torch.int32) + 1
    tables = blocks.view(shape.seqs, pages)
    cache_shape = (shape.seqs * pages + 1, shape.page, shape.kv_heads, shape.head_dim)
    kc = torch.randn(cache_shape, device=device, generator=g).to(dtype)
    vc = torch.randn(cache_shape, device=device, generator=g).to(dtype)
    q = torch.randn(shape.seqs * shape.new, shape.heads, shape.head_dim, device=device, generator=g).to(dtype)
    i32 = torch.int32
    meta = AttentionMetadata(
        torch.arange(shape.seqs + 1, device=device, dtype=i32) * shape.new,
        torch.full((shape.seqs,), shape.seq_len, device=device, dtype=i32),
        tables,
        torch.full((shape.seqs * shape.new,), -1, device=device, dtype=torch.int64),
        shape.new,
        shape.seq_len,
        shape.seqs if shape.new == 1 else 0,
    )
    return q, kc, vc, meta


def attention_ms(shape: AttentionShape, dtype: torch.dtype, tuning: Any = None) -> float:
    """Median milliseconds of one paged-attention call (launch plan built once, outside the timing)."""
    q, kc, vc, meta = paged_inputs(shape, dtype)
    out = torch.empty_like(q)
    plan = plan_paged_attention(q, kc, vc, meta, shape.head_dim**-0.5, out, tuning or DEFAULT_TUNING)
    return bench_ms(lambda: run_all(plan))


def decode_bandwidth(
    shape: AttentionShape, dtype: torch.dtype, ceiling_gbs: float, tuning: Any = None
) -> dict[str, float]:
    """Decode attention: GB/s moved (KV, q, out) and the fraction of the measured HBM ceiling."""
    ms = attention_ms(shape, dtype, tuning)
    gbs = shape.io_bytes(torch.finfo(dtype).bits // 8) / ms / 1e6
    return {"ms": ms, "gb_s": gbs, "fraction_of_hbm": gbs / ceiling_gbs}


def sdpa_flash_ms(shape: AttentionShape, dtype: torch.dtype) -> float:
    """torch's flash SDPA on contiguous [B, H, L, D] tensors (K/V expanded to every query head),
    prefill from scratch (context 0), causal."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if shape.context:
        raise ValueError("sdpa_flash_ms compares prefill from scratch: context must be 0")
    q = torch.randn(shape.seqs, shape.heads, shape.new, shape.head_dim, device="cuda", dtype=dtype)
    k = torch.randn(shape.seqs, shape.heads, shape.new, shape.head_dim, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    f = torch.nn.functional.scaled_dot_product_attention
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return bench_ms(lambda: f(q, k, v, is_causal=True))


def prefill_throughput(shape: AttentionShape, dtype: torch.dtype, tuning: Any = None) -> dict[str, float]:
    """Prefill attention TFLOP/s, and torch flash SDPA's on the same shape (ratio < 2 is the target)."""
    ms = attention_ms(shape, dtype, tuning)
    ref_ms = sdpa_flash_ms(shape, dtype)
    flops = shape.causal_flops()
    return {
        "ms": ms,
        "tflops": flops / ms / 1e9,
        "sdpa_ms": ref_ms,
        "sdpa_tflops": flops / ref_ms / 1e9,
        "time_vs_sdpa": ms / ref_ms,
    }
