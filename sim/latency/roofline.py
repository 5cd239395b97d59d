"""Roofline latency model: each operator costs max(FLOPs / compute, bytes / bandwidth) + a launch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .base import StepShape, context_sum, prefill_tokens
from .specs import GpuSpec, ModelSpec

# Operators of one transformer layer that depend only on the step's token count (Vidur's names).
DENSE_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "kv_cache_save",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


@dataclass(frozen=True)
class RooflineConfig:
    """Efficiency factors applied to a GPU's datasheet peaks (fitted per GPU, or priors)."""

    gemm_compute_eff: float = 0.7
    gemm_memory_eff: float = 0.8
    elementwise_memory_eff: float = 0.6
    attn_compute_eff: float = 0.5
    attn_memory_eff: float = 0.7
    kernel_overhead_us: float = 4.0
    gemm_overhead_us: float = 4.0  # cuBLAS launch + tail of one GEMM
    # GEMM time = (compute^p + memory^p)^(1/p): smooth near the ridge point (0 = plain max)
    gemm_blend_p: float = 0.0
    attn_overhead_us: float = 10.0  # attention kernels also plan / split KV / merge partials
    comm_bw_eff: float = 0.7  # fraction of the one-way link bandwidth an all-reduce achieves
    comm_latency_us: float = 10.0
    # per-operator memory efficiency of elementwise kernels (norm, rope, act, add, emb differ 3x)
    op_memory_eff: dict[str, float] = field(default_factory=dict)
    source: str = "prior"

    def __post_init__(self) -> None:
        for name in (
            "gemm_compute_eff",
            "gemm_memory_eff",
            "elementwise_memory_eff",
            "attn_compute_eff",
            "attn_memory_eff",
            "comm_bw_eff",
        ):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"RooflineConfig: field {name!r} must be in (0, 1], got {value}")
        if self.gemm_blend_p != 0.0 and self.gemm_blend_p < 1.0:
            raise ValueError(
                f"RooflineConfig: field 'gemm_blend_p' must be 0 (max) or >= 1, got {self.gemm_blend_p}"
            )
        for name in ("kernel_overhead_us", "gemm_overhead_us", "attn_overhead_us", "comm_latency_us"):
            if getattr(self, name) < 0:
                raise ValueError(f"RooflineConfig: field {name!r} must be >= 0")
        for op, value in self.op_memory_eff.items():
            if not 0.0 < value <= 1.0:
                raise ValueError(f"RooflineConfig: op_memory_eff[{op!r}] must be in (0, 1], got {value}")

    @classmethod
    def from_gpu(cls, gpu: GpuSpec) -> RooflineConfig:
        """Priors from the GPU spec's own efficiency factors."""
        return cls(
            gemm_compute_eff=gpu.compute_efficiency,
            gemm_memory_eff=gpu.memory_efficiency,
            kernel_overhead_us=gpu.kernel_overhead_us,
            gemm_overhead_us=gpu.kernel_overhead_us,
            comm_latency_us=gpu.comm_latency_us,
            source=f"gpu-spec priors ({gpu.name})",
        )


class RooflineModel:
    """Step time from a model spec and a GPU spec; per-token-count parts are cached."""

    name = "roofline"

    def __init__(
        self, model: ModelSpec, gpu: GpuSpec, tp: int = 1, config: RooflineConfig | None = None
    ) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.model, self.gpu, self.tp = model, gpu, tp
        self.config = config or RooflineConfig.from_gpu(gpu)
        c = self.config
        self.peak_flops = gpu.peak_tflops * 1e12  # FLOP/s
        self.hbm_bandwidth = gpu.hbm_gbps * 1e9  # bytes/s
        self._ovh = c.kernel_overhead_us * 1e-6
        self._attn_ovh = c.attn_overhead_us * 1e-6
        d = model.dtype_bytes
        self._q = model.q_size // tp if model.q_size % tp == 0 else model.q_size / tp
        self._kv = model.kv_heads_per_gpu(tp) * model.head_dim
        # per-token attention coefficients: FLOPs per (query, key) pair; KV bytes per key
        self._attn_flop = 4.0 * self._q
        self._kv_byte = 2.0 * self._kv * d
        self._q_byte = 2.0 * self._q * d
        # the decode path's factors as native fields (config and model are frozen dataclasses,
        # read generically by compiled code); the same products the formulas form
        self._attn_rate = self.peak_flops * c.attn_compute_eff
        self._attn_bw = self.hbm_bandwidth * c.attn_memory_eff
        self._layers: int = model.num_layers
        self._dense_cache: dict[int, float] = {}
        self._head_cache: dict[int, float] = {}

    # ---- operator costs (one layer, one GPU) ---------------------------------------------
    def op(self, flops: float, nbytes: float, compute_eff: float, memory_eff: float) -> float:
        """One kernel: the slower of its compute and memory time, plus its launch."""
        return (
            max(flops / (self.peak_flops * compute_eff), nbytes / (self.hbm_bandwidth * memory_eff))
            + self._ovh
        )

    def gemm(self, tokens: int, k: int, n: float) -> float:
        """A [tokens x k] @ [k x n] GEMM with weights read once."""
        d = self.model.dtype_bytes
        return self.work_time(2.0 * tokens * k * n, (k * n + tokens * (k + n)) * d, True)

    def elementwise(self, nbytes: float, op: str = "") -> float:
        """A memory-bound elementwise kernel (norm, rope, activation, add, cache write)."""
        eff = self.config.op_memory_eff.get(op, self.config.elementwise_memory_eff)
        return nbytes / (self.hbm_bandwidth * eff) + self._ovh

    def op_work(self, tokens: int) -> dict[str, tuple[float, float, bool]]:
        """(FLOPs, bytes, is_gemm) of each token-count-dependent operator of one layer, one GPU."""
        m, tp, d = self.model, self.tp, self.model.dtype_bytes
        h, q, kv = m.hidden_size, self._q, self._kv
        inter = m.intermediate_size / tp
        up = 2 * inter if m.gated_mlp else inter

        def gemm(k: float, n: float) -> tuple[float, float, bool]:
            return 2.0 * tokens * k * n, (k * n + tokens * (k + n)) * d, True

        norm = (0.0, 2 * tokens * h * d + h * d, False)
        return {
            "input_layernorm": norm,
            "attn_pre_proj": gemm(h, q + 2 * kv),
            "attn_rope": (0.0, 2 * tokens * (q + kv) * d, False),
            "kv_cache_save": (0.0, 2 * tokens * 2 * kv * d, False),
            "attn_post_proj": gemm(q, h),
            "post_attention_layernorm": norm,
            "mlp_up_proj": gemm(h, up),
            "mlp_act": (0.0, tokens * (up + inter) * d, False),
            "mlp_down_proj": gemm(inter, h),
            # one in-place residual add per layer (vLLM fuses the other into the next RMSNorm);
            # Vidur's measured add moves ~2 T*h*d bytes at near-peak bandwidth
            "add": (0.0, 2 * tokens * h * d, False),
            "emb": (0.0, 2 * tokens * h * d, False),
        }

    def work_time(self, flops: float, nbytes: float, is_gemm: bool, op: str = "") -> float:
        """Seconds of one operator from its work (GEMM or memory-bound elementwise)."""
        c = self.config
        if not is_gemm:
            return self.elementwise(nbytes, op)
        t_c = flops / (self.peak_flops * c.gemm_compute_eff)
        t_m = nbytes / (self.hbm_bandwidth * c.gemm_memory_eff)
        p = c.gemm_blend_p
        t = (t_c**p + t_m**p) ** (1.0 / p) if p else max(t_c, t_m)
        return t + c.gemm_overhead_us * 1e-6

    def dense_ops(self, tokens: int) -> dict[str, float]:
        """Seconds of each token-count-dependent operator of one layer, on one GPU."""
        work = self.op_work(tokens)
        del work["emb"]
        return {op: self.work_time(w[0], w[1], w[2], op) for op, w in work.items()}  # (no *w: a generic call)

    def emb(self, tokens: int) -> float:
        """Embedding lookup, once per step."""
        return self.elementwise(2 * tokens * self.model.hidden_size * self.model.dtype_bytes, "emb")

    def all_reduce(self, nbytes: float) -> float:
        """Ring all-reduce over the TP group: 2(p-1)/p of the message crosses each link."""
        if self.tp == 1:
            return 0.0
        c = self.config
        one_way = self.gpu.nvlink_gbps * 1e9 / 2 * c.comm_bw_eff
        return 2 * (self.tp - 1) / self.tp * nbytes / one_way + c.comm_latency_us * 1e-6

    def all_reduce_bandwidth(self, nbytes: float) -> float:
        """The bandwidth part of one ring all-reduce over the TP group (no fixed latency)."""
        if self.tp == 1:
            return 0.0
        one_way = self.gpu.nvlink_gbps * 1e9 / 2 * self.config.comm_bw_eff
        return 2 * (self.tp - 1) / self.tp * nbytes / one_way

    def collective_time(self, tokens: int) -> float:
        """All layers' TP all-reduces of a step of `tokens` tokens (two per layer)."""
        m = self.model
        return m.num_layers * 2 * self.all_reduce(tokens * m.hidden_size * m.dtype_bytes)

    def lm_head(self, sampled: int) -> float:
        """Final norm + vocab projection for the sampled positions only (vocab sharded by TP)."""
        if sampled == 0:
            return 0.0
        m = self.model
        h, d = m.hidden_size, m.dtype_bytes
        norm = self.elementwise(2 * sampled * h * d, "input_layernorm")
        return norm + self.gemm(sampled, h, m.vocab_size / self.tp)

    def attention(self, shape: StepShape) -> tuple[float, float]:
        """(prefill, decode) attention seconds of one layer: FlashAttention-style, KV read once."""
        return self.prefill_attention(shape.prefills), self.decode_attention(shape.decodes, shape.num_drafts)

    def prefill_attention_work(self, prefills: list[tuple[int, int]]) -> tuple[float, float]:
        """(FLOPs, bytes) of causal attention of prefill chunks over cached context + themselves."""
        flops = nbytes = 0.0
        for n, ctx in prefills:
            flops += n * (ctx + (n + 1) * 0.5)
            nbytes += (ctx + n) * self._kv_byte + n * self._q_byte
        return flops * self._attn_flop, nbytes

    def decode_attention_work(self, decodes: list[tuple[int, int]], drafts: int) -> tuple[float, float]:
        """(FLOPs, bytes) of decode / draft-verification attention: each query reads its KV."""
        nd = len(decodes)
        ctx_sum = context_sum(decodes)
        if drafts == 0:
            pairs, keys, queries = ctx_sum + nd, ctx_sum + nd, nd
        else:
            pairs = sum((1 + k) * (ctx + 1 + k) for ctx, k in decodes)
            keys, queries = ctx_sum + nd + drafts, nd + drafts
        return pairs * self._attn_flop, keys * self._kv_byte + queries * self._q_byte

    def prefill_attention(self, prefills: list[tuple[int, int]]) -> float:
        if not prefills:
            return 0.0
        c = self.config
        flops, nbytes = self.prefill_attention_work(prefills)
        return (
            max(
                flops / (self.peak_flops * c.attn_compute_eff),
                nbytes / (self.hbm_bandwidth * c.attn_memory_eff),
            )
            + self._attn_ovh
        )

    def decode_attention(self, decodes: list[tuple[int, int]], drafts: int) -> float:
        if not decodes:
            return 0.0
        return self._attention_time(*self.decode_attention_work(decodes, drafts))

    def _attention_time(self, flops: float, nbytes: float) -> float:
        """One layer's decode attention: the slower of compute and memory, plus a fixed overhead."""
        a, b = flops / self._attn_rate, nbytes / self._attn_bw
        return (b if b > a else a) + self._attn_ovh  # max(a, b), without a generic call

    def plain_decode_attention(self, num_decodes: int, ctx_sum: int) -> float:
        """One layer's attention of plain decodes (no drafts) from their count and context sum."""
        pairs = ctx_sum + num_decodes
        return self._attention_time(
            pairs * self._attn_flop, pairs * self._kv_byte + num_decodes * self._q_byte
        )

    def decode_step_time(self, num_decodes: int, ctx_sum: int) -> float:
        """step_time of plain decodes (no prefill, no drafts) from their count and context sum.

        step_time routes such shapes here, so the fast-forward gets the very same float.
        """
        attn = self.plain_decode_attention(num_decodes, ctx_sum)
        return self.dense_time(num_decodes) + self._layers * attn + self.head_time(num_decodes)

    # ---- whole step -----------------------------------------------------------------------
    def dense_time(self, tokens: int) -> float:
        """All layers' token-count-dependent work, embedding and TP all-reduces (cached)."""
        t = self._dense_cache.get(tokens)
        if t is None:
            m = self.model
            per_layer = sum(self.dense_ops(tokens).values())
            per_layer += 2 * self.all_reduce(tokens * m.hidden_size * m.dtype_bytes)
            t = m.num_layers * per_layer + self.emb(tokens)
            self._dense_cache[tokens] = t
        return t

    def head_time(self, sampled: int) -> float:
        """LM head time (cached by number of sampled positions)."""
        t = self._head_cache.get(sampled)
        if t is None:
            t = self._head_cache[sampled] = self.lm_head(sampled)
        return t

    def step_time(self, shape: StepShape) -> float:
        """Seconds of one GPU step of this shape."""
        prefills, decodes, drafts = shape.prefills, shape.decodes, shape.num_drafts
        if not drafts:
            return self.plain_step_time(prefills, len(decodes), shape.decode_context)
        attn = self.prefill_attention(prefills) + self.decode_attention(decodes, drafts)
        return (
            self.dense_time(shape.num_tokens)
            + self.model.num_layers * attn
            + self.head_time(shape.num_sampled)
        )

    def plain_step_time(self, prefills: list[tuple[int, int]], num_decodes: int, ctx_sum: int) -> float:
        """step_time of prefill chunks and draft-free decodes given by their count and context sum
        (step_time routes such shapes here: the executor gets the same float without a decode list)."""
        if not prefills:
            return self.decode_step_time(num_decodes, ctx_sum) if num_decodes else 0.0
        tokens = prefill_tokens(prefills) + num_decodes
        if tokens == 0:
            return 0.0
        decode = self.plain_decode_attention(num_decodes, ctx_sum) if num_decodes else 0.0
        attn = self.prefill_attention(prefills) + decode
        return (
            self.dense_time(tokens)
            + self.model.num_layers * attn
            + self.head_time(len(prefills) + num_decodes)
        )

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per operator for the whole step (sums to step_time)."""
        tokens = shape.num_tokens
        if tokens == 0:
            return {}
        m = self.model
        layers = m.num_layers
        out = {k: layers * v for k, v in self.dense_ops(tokens).items()}
        pre, dec = self.attention(shape)
        out["attn_prefill"], out["attn_decode"] = layers * pre, layers * dec
        out["all_reduce"] = layers * 2 * self.all_reduce(tokens * m.hidden_size * m.dtype_bytes)
        out["emb"] = self.emb(tokens)
        sampled = len(shape.prefills) + tokens - sum(n for n, _ in shape.prefills)
        out["lm_head"] = self.head_time(sampled)
        return out

    def describe(self) -> dict:
        """Model kind, specs and the efficiency factors used."""
        return {
            "kind": self.name,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "roofline": asdict(self.config),
        }
