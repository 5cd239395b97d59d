"""OverheadModel: a GPU model's kernel time plus the engine's collectives, sampler and launch floor.

    gpu(s)  = kernel_scale x (B(s) - AR_B(s)) + collectives(s) + sampler(s)
    step(s) = max(gpu(s), L x launch_us_per_layer)   for a step that does not replay a CUDA graph
            = gpu(s)                                 for one that does

B is the wrapped table or roofline model's time and AR_B its own all-reduce estimate, replaced by
2 L all-reduces of the hidden states plus one gather of the sampled logits, each costing the
engine's fixed latency at this TP degree plus the link-bandwidth time of the fitted ring formula.
The sampler reads the sampled positions' logits a few times in fp32. The host CPU phases are not in
here: the CPU-cost model charges them, so a synchronous engine adds them and an asynchronous one
hides them (`cpu_cost_config`).
"""

from __future__ import annotations

from typing import Any

from .base import StepShape, prefill_tokens
from .cpu_cost import CPU_PHASES, STEP_PHASES, CpuCostConfig, PhaseCost
from .engines import OverheadTerms
from .roofline import RooflineModel

# vLLM's Sampler on the gathered logits (fp32): temperature, softmax, log-softmax and the
# exponential-race multinomial each pass over sampled x vocab floats; ~8 kernels in all
SAMPLER_PASSES = 4
SAMPLER_KERNELS = 8


class OverheadModel:
    """A table or roofline model with the engine's overhead terms on top (same interface)."""

    def __init__(self, inner: Any, terms: OverheadTerms) -> None:
        self.inner, self.terms = inner, terms
        self.name: str = inner.name
        roofline: RooflineModel = inner if isinstance(inner, RooflineModel) else inner.roofline
        self.roofline = roofline
        self.model, self.gpu, self.tp = roofline.model, roofline.gpu, roofline.tp
        self.layers = self.model.num_layers
        self.engine = terms.engine
        self.launch_floor: float = self.layers * terms.launch_us_per_layer * 1e-6
        self.alpha: float = terms.allreduce_latency_s(self.tp)
        self.scale: float = terms.kernel_scale
        self._dense: dict[int, tuple[float, float]] = {}
        self._head: dict[int, float] = {}
        # plain decodes of n requests: (what is added to scale x base, the launch floor or 0)
        self._decode: dict[int, tuple[float, float]] = {}

    # ---- the terms -------------------------------------------------------------------------
    def collectives(self, tokens: int) -> tuple[float, float]:
        """(the wrapped model's all-reduce time, the engine's) for a step of `tokens` tokens."""
        parts = self._dense.get(tokens)
        if parts is None:
            m = self.model
            ours = 0.0
            if self.tp > 1:
                one = self.alpha + self.roofline.all_reduce_bandwidth(tokens * m.hidden_size * m.dtype_bytes)
                ours = 2 * self.layers * one
            parts = self._dense[tokens] = (self.inner.collective_time(tokens), ours)
        return parts

    def head(self, sampled: int) -> float:
        """Logits gather to the sampling rank plus the sampler, for `sampled` positions."""
        t = self._head.get(sampled)
        if t is None:
            t = self._head[sampled] = self.sampler(sampled) + self.logits_gather(sampled)
        return t

    def sampler(self, sampled: int) -> float:
        """The sampler's kernels over the sampled positions' logits (fp32)."""
        rl = self.roofline
        return (
            SAMPLER_KERNELS * rl.config.kernel_overhead_us * 1e-6
            + SAMPLER_PASSES
            * sampled
            * self.model.vocab_size
            * 4
            / (rl.gpu.hbm_gbps * 1e9 * rl.config.elementwise_memory_eff)
        )

    def logits_gather(self, sampled: int) -> float:
        """Gather of the vocab-sharded logits (model dtype): (tp-1)/tp of them cross the links."""
        if self.tp == 1:
            return 0.0
        m = self.model
        return self.alpha + self.roofline.all_reduce_bandwidth(sampled * m.vocab_size * m.dtype_bytes) / 2

    def gpu_time(self, base: float, tokens: int, sampled: int) -> float:
        """Kernel time of a step whose wrapped-model time is `base`."""
        theirs, ours = self.collectives(tokens)
        return self.scale * (base - theirs) + ours + self.head(sampled)

    def eager(self, tokens: int, decode_only: bool) -> bool:
        """Whether the step is launched kernel by kernel (no CUDA graph replay)."""
        return self.engine.eager(tokens, decode_only)

    # ---- the latency-model interface -------------------------------------------------------
    def decode_step_time(self, num_decodes: int, ctx_sum: int) -> float:
        """step_time of plain decodes from their count and context sum (the fast-forward's path)."""
        c = self._decode.get(num_decodes)
        if c is None:
            theirs, ours = self.collectives(num_decodes)
            floor = self.launch_floor if self.eager(num_decodes, True) else 0.0
            c = self._decode[num_decodes] = (ours + self.head(num_decodes) - self.scale * theirs, floor)
        g = self.scale * self.inner.decode_step_time(num_decodes, ctx_sum) + c[0]
        return c[1] if c[1] > g else g

    def step_time(self, shape: StepShape) -> float:
        """Seconds of one GPU step of this shape (plain decodes go through decode_step_time)."""
        prefills, decodes, drafts = shape.prefills, shape.decodes, shape.num_drafts
        if not drafts:
            return self.plain_step_time(prefills, len(decodes), shape.decode_context)
        return self._mixed(self.inner.step_time(shape), shape.num_tokens, shape.num_sampled)

    def plain_step_time(self, prefills: list[tuple[int, int]], num_decodes: int, ctx_sum: int) -> float:
        """step_time of prefill chunks and draft-free decodes given by their count and context sum
        (step_time routes such shapes here: the executor gets the same float without a decode list)."""
        if not prefills:
            return self.decode_step_time(num_decodes, ctx_sum) if num_decodes else 0.0
        tokens = prefill_tokens(prefills) + num_decodes
        if tokens == 0:
            return 0.0
        inner = self.inner.plain_step_time(prefills, num_decodes, ctx_sum)
        return self._mixed(inner, tokens, len(prefills) + num_decodes)

    def _mixed(self, inner: float, tokens: int, sampled: int) -> float:
        """A step with prefills or drafts: the wrapped model's time with the overheads, floored
        when launched eagerly."""
        g = self.gpu_time(inner, tokens, sampled)
        if self.eager(tokens, False) and self.launch_floor > g:
            return self.launch_floor
        return g

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per operator: the wrapped model's kernels (scaled), the engine's all-reduces,
        logits gather and sampler, and the launch floor's excess (sums to step_time)."""
        tokens = shape.num_tokens
        if tokens == 0:
            return {}
        out = {k: self.scale * v for k, v in self.inner.breakdown(shape).items() if k != "all_reduce"}
        sampled = len(shape.prefills) + tokens - sum(n for n, _ in shape.prefills)
        out["all_reduce"] = self.collectives(tokens)[1]
        out["logits_gather"] = self.logits_gather(sampled)
        out["sampler"] = self.sampler(sampled)
        out["launch_floor"] = max(0.0, self.step_time(shape) - sum(out.values()))
        return out

    def describe(self) -> dict:
        """The wrapped model's description plus the overhead terms and their sources."""
        out = dict(self.inner.describe())
        out["overhead"] = self.terms.to_dict()
        return out


def cpu_cost_config(terms: OverheadTerms) -> CpuCostConfig:
    """The CPU-cost model's phases for these terms: the documented defaults of the four phases every
    step has rescaled so that their bases sum to step_us and their per-request costs to
    per_request_us (host speed applied); the grammar bitmask's, a phase only structured output
    has, scaled by host speed alone."""
    base = CpuCostConfig()
    default_base = sum(base.phases[k].base for k in STEP_PHASES)
    default_req = sum(base.phases[k].per_req for k in STEP_PHASES)
    host = terms.host_speed
    f_base = terms.step_us * 1e-6 / default_base if terms.step_us is not None else host
    f_req = terms.per_request_us * 1e-6 / default_req if terms.per_request_us is not None else host
    phases = {}
    for kind in CPU_PHASES:
        c = base.phases[kind]
        step = kind in STEP_PHASES
        phases[kind] = PhaseCost(
            base=c.base * (f_base if step else host),
            per_req=c.per_req * (f_req if step else host),
            per_token=c.per_token * host,
        )
    src = terms.sources.get("step_us", "CPU-cost model defaults")
    return CpuCostConfig(
        phases=phases,
        source=f"{terms.engine.name} overhead terms ({src})",
        tp_broadcast=PhaseCost(base=terms.tp_broadcast_us * 1e-6),
    )
