"""Triton kernels around attention: KV store by slot mapping, fused add+RMSNorm, rotary, SiLU-and-mul."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch
from .metadata import check_devices, check_slot_mapping


@triton.jit
def store_kv_kernel(
    K, V, K_cache, V_cache, slot_mapping, stride_kt, stride_vt, ROW: tl.constexpr, BLOCK: tl.constexpr
):
    """One program per token: copy its [Hk * D] key and value row into the slot's cache row."""
    t = tl.program_id(0)
    slot = tl.load(slot_mapping + t)
    offs = tl.arange(0, BLOCK)
    ok = (offs < ROW) & (slot >= 0)
    k = tl.load(K + t * stride_kt + offs, mask=ok, other=0.0)
    v = tl.load(V + t * stride_vt + offs, mask=ok, other=0.0)
    dst = slot.to(tl.int64) * ROW + offs
    tl.store(K_cache + dst, k.to(K_cache.dtype.element_ty), mask=ok)
    tl.store(V_cache + dst, v.to(V_cache.dtype.element_ty), mask=ok)


def store_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    validate: bool = True,
) -> None:
    """Write K/V [T, Hk, D] into the paged caches at slot_mapping (-1 = skip)."""
    num_blocks, page, heads, dim = key_cache.shape
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError("store_kv: caches must be contiguous")
    if key.shape[1:] != (heads, dim) or value.shape != key.shape or slot_mapping.numel() != key.shape[0]:
        raise ValueError(
            f"store_kv: key {tuple(key.shape)} / slots {slot_mapping.numel()} do not fit "
            f"cache {tuple(key_cache.shape)}"
        )
    check_devices(
        "store_kv", key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping
    )
    if validate:
        check_slot_mapping(slot_mapping, num_blocks, page)
    key = key if key[0].is_contiguous() else key.contiguous()
    value = value if value[0].is_contiguous() else value.contiguous()
    if key.shape[0]:
        plan_store_kv(key, value, key_cache, value_cache, slot_mapping).run()


def plan_store_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> Launch:
    """One program per token (rows whose heads are contiguous)."""
    row = key_cache.shape[2] * key_cache.shape[3]
    return Launch(
        store_kv_kernel,
        (key.shape[0],),
        (key, value, key_cache, value_cache, slot_mapping, key.stride(0), value.stride(0)),
        {"ROW": row, "BLOCK": triton.next_power_of_2(row)},
    )


@triton.jit
def rms_norm_kernel(
    X,
    R,
    W,
    Out,
    R_out,
    eps,
    stride_x,
    stride_r,
    stride_o,
    HIDDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    """One program per row: h = x (+ residual); out = h / rms(h) * w; residual_out = h."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ok = offs < HIDDEN
    h = tl.load(X + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        h += tl.load(R + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(R_out + row * stride_o + offs, h.to(R_out.dtype.element_ty), mask=ok)
    inv = 1.0 / tl.sqrt(tl.sum(h * h, 0) / HIDDEN + eps)
    w = tl.load(W + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_o + offs, (h * inv * w).to(Out.dtype.element_ty), mask=ok)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused (x + residual) then RMSNorm; returns (normed, new residual)."""
    rows, hidden = x.shape
    if weight.shape != (hidden,) or (residual is not None and residual.shape != x.shape):
        raise ValueError(f"rms_norm: x {tuple(x.shape)}, weight {tuple(weight.shape)} mismatch")
    check_devices("rms_norm", x, weight=weight, **({} if residual is None else {"residual": residual}))
    x = x if x.stride(-1) == 1 else x.contiguous()
    res = x if residual is None else (residual if residual.stride(-1) == 1 else residual.contiguous())
    out, res_out = torch.empty_like(x), torch.empty_like(x)
    if rows:
        plan_rms_norm(x, weight, eps, res, residual is not None, out, res_out).run()
    return out, res_out


def plan_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    res: torch.Tensor,
    has_residual: bool,
    out: torch.Tensor,
    res_out: torch.Tensor,
) -> Launch:
    """One program per row."""
    hidden = x.shape[1]
    return Launch(
        rms_norm_kernel,
        (x.shape[0],),
        (x, res, weight, out, res_out, eps, x.stride(0), res.stride(0), out.stride(0)),
        {
            "HIDDEN": hidden,
            "BLOCK": triton.next_power_of_2(hidden),
            "HAS_RESIDUAL": has_residual,
            "num_warps": 4 if hidden <= 4096 else 8,
        },
    )


@triton.jit
def _rotate_heads(
    base,
    t,
    stride_t,
    stride_h,
    cos,
    sin,
    HEADS: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """Rotate the HEADS heads of token t in place."""
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_HALF)
    ptr = base + t * stride_t + offs_h[:, None] * stride_h + offs_d[None, :]
    ok = (offs_h[:, None] < HEADS) & (offs_d[None, :] < HALF)
    x1 = tl.load(ptr, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + HALF, mask=ok, other=0.0).to(tl.float32)
    tl.store(ptr, (x1 * cos - x2 * sin).to(base.dtype.element_ty), mask=ok)
    tl.store(ptr + HALF, (x2 * cos + x1 * sin).to(base.dtype.element_ty), mask=ok)


@triton.jit
def rotary_kernel(
    positions,
    Q,
    K,
    cos_sin,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cs,
    HQ: tl.constexpr,
    HK: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """One program per token: rotate every q and k head in place (rotate-half convention)."""
    t = tl.program_id(0)
    pos = tl.load(positions + t).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_HALF)
    d_ok = offs_d < HALF
    cos = tl.load(cos_sin + pos * stride_cs + offs_d, mask=d_ok, other=0.0)[None, :]
    sin = tl.load(cos_sin + pos * stride_cs + HALF + offs_d, mask=d_ok, other=0.0)[None, :]
    _rotate_heads(Q, t, stride_qt, stride_qh, cos, sin, HQ, HALF, BLOCK_H, BLOCK_HALF)
    _rotate_heads(K, t, stride_kt, stride_kh, cos, sin, HK, HALF, BLOCK_H, BLOCK_HALF)


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [T, Hq, D] and k [T, Hk, D] in place by position; returns them."""
    tokens, hq, dim = q.shape
    if k.shape[0] != tokens or k.shape[2] != dim or positions.numel() != tokens or cos_sin.shape[1] != dim:
        raise ValueError(
            f"rotary: q {tuple(q.shape)}, k {tuple(k.shape)}, positions "
            f"{positions.numel()}, cos_sin {tuple(cos_sin.shape)} mismatch"
        )
    if q.stride(-1) != 1 or k.stride(-1) != 1 or not cos_sin.is_contiguous():
        raise ValueError("rotary: the head dimension of q, k and cos_sin must be contiguous")
    check_devices("rotary", q, k=k, positions=positions, cos_sin=cos_sin)
    if tokens and positions.device.type == "cpu" and int(positions.max()) >= cos_sin.shape[0]:
        raise ValueError(f"rotary: position {int(positions.max())} >= table size {cos_sin.shape[0]}")
    if tokens:
        plan_rotary(positions, q, k, cos_sin).run()
    return q, k


def plan_rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor) -> Launch:
    """One program per token, every q and k head."""
    hq, hk, dim = q.shape[1], k.shape[1], q.shape[2]
    return Launch(
        rotary_kernel,
        (q.shape[0],),
        (positions, q, k, cos_sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin.stride(0)),
        {
            "HQ": hq,
            "HK": hk,
            "HALF": dim // 2,
            "BLOCK_H": triton.next_power_of_2(max(hq, hk)),
            "BLOCK_HALF": triton.next_power_of_2(dim // 2),
        },
    )


@triton.jit
def silu_and_mul_kernel(X, Out, stride_x, stride_o, INTER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, chunk): out = silu(gate) * up over BLOCK columns."""
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < INTER
    g = tl.load(X + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(X + row * stride_x + INTER + offs, mask=ok, other=0.0).to(tl.float32)
    out = g / (1.0 + tl.exp(-g)) * u
    tl.store(Out + row * stride_o + offs, out.to(Out.dtype.element_ty), mask=ok)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[:, :I]) * x[:, I:] for the merged gate/up projection output [T, 2I]."""
    rows, width = x.shape
    if width % 2:
        raise ValueError(f"silu_and_mul: last dimension must be even, got {width}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty(rows, width // 2, dtype=x.dtype, device=x.device)
    if rows:
        plan_silu_and_mul(x, out).run()
    return out


def plan_silu_and_mul(x: torch.Tensor, out: torch.Tensor) -> Launch:
    """Programs (row, chunk of up to 1024 columns)."""
    inter = out.shape[1]
    block = min(1024, triton.next_power_of_2(inter))
    return Launch(
        silu_and_mul_kernel,
        (x.shape[0], triton.cdiv(inter, block)),
        (x, out, x.stride(0), out.stride(0)),
        {"INTER": inter, "BLOCK": block},
    )
