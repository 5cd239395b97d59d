"""Why a step costs what it costs: its time split into compute, memory, per-kernel fixed cost,
collectives, sampler and the host launch floor (`schedsim latency --explain`)."""

from __future__ import annotations

from .base import StepShape
from .overhead import OverheadModel

TERMS = ("compute", "memory", "kernel_fixed", "collectives", "sampler", "launch_floor")
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
KERNELS_PER_OP = {"lm_head": 2}  # final norm + vocab projection


def _bound(model: OverheadModel, tokens: int, sampled: int, shape: StepShape) -> dict[str, bool]:
    """Whether each operator of this step is compute-bound (True) or memory-bound (the roofline's
    verdict, also applied to measured table times)."""
    rl, c = model.roofline, model.roofline.config
    peak, bw = rl.gpu.peak_tflops * 1e12, rl.gpu.hbm_gbps * 1e9
    out: dict[str, bool] = {}
    for op, (flops, nbytes, is_gemm) in rl.op_work(tokens).items():
        out[op] = is_gemm and flops / (peak * c.gemm_compute_eff) > nbytes / (bw * c.gemm_memory_eff)
    m = model.model
    head_n = m.vocab_size / model.tp
    head_flops = 2.0 * sampled * m.hidden_size * head_n
    head_bytes = (m.hidden_size * head_n + sampled * (m.hidden_size + head_n)) * m.dtype_bytes
    out["lm_head"] = head_flops / (peak * c.gemm_compute_eff) > head_bytes / (bw * c.gemm_memory_eff)
    pre_f, pre_b = rl.prefill_attention_work(shape.prefills)
    dec_f, dec_b = rl.decode_attention_work(shape.decodes, shape.num_drafts)
    out["attn_prefill"] = pre_f / (peak * c.attn_compute_eff) > pre_b / (bw * c.attn_memory_eff)
    out["attn_decode"] = dec_f / (peak * c.attn_compute_eff) > dec_b / (bw * c.attn_memory_eff)
    return out


def _fixed_per_call(model: OverheadModel, op: str) -> float:
    """The per-kernel fixed cost (launch and tail) of one call of this operator."""
    c = model.roofline.config
    if op in GEMMS:
        return c.gemm_overhead_us * 1e-6
    if op.startswith("attn_prefill") or op.startswith("attn_decode"):
        return c.attn_overhead_us * 1e-6
    return KERNELS_PER_OP.get(op, 1) * c.kernel_overhead_us * 1e-6


def explain_step(model: OverheadModel, shape: StepShape) -> dict[str, float]:
    """Seconds of this step by term; the terms sum to model.step_time(shape)."""
    tokens = shape.num_tokens
    out = dict.fromkeys(TERMS, 0.0)
    if tokens == 0:
        return out
    sampled = shape.num_sampled
    bound = _bound(model, tokens, sampled, shape)
    layers = model.layers
    for op, t in model.inner.breakdown(shape).items():
        if op == "all_reduce" or t <= 0:
            continue
        calls = 1 if op in ("emb", "lm_head") else layers
        fixed = min(t, calls * _fixed_per_call(model, op))
        out["kernel_fixed"] += fixed
        out["compute" if bound.get(op, False) else "memory"] += t - fixed
    g = model.scale
    for key in ("compute", "memory", "kernel_fixed"):
        out[key] *= g
    _, ours = model.collectives(tokens)
    out["collectives"] = ours + model.logits_gather(sampled)
    out["sampler"] = model.sampler(sampled)
    gpu = sum(out.values())
    decode_only = not shape.prefills and not shape.num_drafts
    total = model.step_time(shape)
    if model.eager(tokens, decode_only) and total > gpu:
        out["launch_floor"] = total - gpu
    return out
