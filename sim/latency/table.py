"""Table latency model: measured per-operator curves, measured collectives, roofline for the rest."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import StepShape, prefill_tokens
from .interp import Curve, ExtrapolationWarning
from .profiles import (
    COMPUTE_OPS,
    Profiles,
    node_for_gpu,
    read_profiles,
    shipped_compute_profiles,
    shipped_profile_keys,
)
from .roofline import RooflineModel
from .specs import GpuSpec, ModelSpec, get_model_spec, list_model_specs

LAYER_OPS = tuple(op for op in COMPUTE_OPS if op != "emb")


@dataclass
class TableProfile:
    """The measured curves for one (model, gpu, tp): per-operator by tokens, all-reduce by bytes."""

    model: str
    gpu: str
    tp: int
    ops: dict[str, Curve]
    all_reduce: Curve | None = None
    source: str = ""
    grid_max_tokens: int = 0
    notes: list[str] = field(default_factory=list)


def _curves_for(profiles: Profiles, model: str, gpu: str, tp: int) -> dict[str, Curve]:
    df = profiles.compute
    if df.empty:
        return {}
    sub = df[(df.model == model) & (df.gpu == gpu) & (df.tp == tp)]
    return {
        op: Curve(g.num_tokens.tolist(), g.time_s.tolist(), f"{model}/{gpu}/tp{tp}/{op}", warn=False)
        for op, g in sub.groupby("op")
    }


def _all_reduce_curve(profiles: Profiles, gpu: str, tp: int) -> Curve | None:
    node, df = node_for_gpu(gpu), profiles.network
    if tp == 1 or node is None or df.empty:
        return None
    sub = df[(df.node == node) & (df.collective == "all_reduce") & (df.num_workers == tp)]
    if sub.empty:
        return None
    return Curve(sub.size_bytes.tolist(), sub.time_s.tolist(), f"all_reduce/{node}/{tp}", warn=False)


def find_profile(
    model: ModelSpec, gpu: GpuSpec, tp: int, calibration: dict[str, Any] | None = None
) -> TableProfile | None:
    """The measured profile for (model, gpu, tp): the calibration's tables first, then shipped."""
    sources: list[tuple[Profiles, str]] = []
    wanted = (model.name, *same_layer_shapes(model))  # the only models whose rows are read
    tables = ("compute", "network") if tp > 1 else ("compute",)  # all-reduce only under TP
    if calibration and calibration.get("profiles"):
        folder = Path(calibration["_path"]).parent / calibration["profiles"]
        sources.append((read_profiles(folder, wanted, tables), str(folder)))
    shipped = shipped_profile_keys()
    if any((name, gpu.name, tp) in shipped for name in wanted):  # parsed only when it has one
        sources.append((shipped_compute_profiles(wanted, tp > 1), "shipped (Vidur, MIT)"))
    for names in ([model.name], same_layer_shapes(model)):
        found = []
        for name in names:
            for profiles, where in sources:
                ops = _curves_for(profiles, name, gpu.name, tp)
                if ops:
                    found.append((int(max(c.xs[-1] for c in ops.values())), name, ops, profiles, where))
                    break
        if found:  # the model's own profile, else the same-shaped model with the widest grid
            grid, name, ops, profiles, where = max(found, key=lambda f: f[0])
            if name != model.name:
                where += f"; measured on {name} (same layer shapes)"
            return TableProfile(
                model.name,
                gpu.name,
                tp,
                ops,
                _all_reduce_curve(profiles, gpu.name, tp),
                source=where,
                grid_max_tokens=grid,
            )
    return None


def _layer_key(m: ModelSpec) -> tuple:
    return (
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.num_key_value_heads,
        m.head_dim,
        m.intermediate_size,
        m.gated_mlp,
        m.dtype_bytes,
    )


def same_layer_shapes(model: ModelSpec) -> list[str]:
    """Shipped specs whose layers are identical (e.g. Llama-3.1-8B and Llama-3-8B): their
    per-operator profiles apply unchanged."""
    key = _layer_key(model)
    return [n for n in list_model_specs() if n != model.name and _layer_key(get_model_spec(n)) == key]


class TableModel:
    """Interpolates measured operator times; attention, LM head and gaps come from the roofline."""

    name = "table"

    def __init__(self, profile: TableProfile, roofline: RooflineModel) -> None:
        self.profile, self.roofline = profile, roofline
        self.model = roofline.model
        missing = [op for op in LAYER_OPS if op not in profile.ops]
        self.ops_from_roofline = missing + ["kv_cache_save", "attn_prefill", "attn_decode", "lm_head"]
        if "emb" not in profile.ops:
            self.ops_from_roofline.append("emb")
        if roofline.tp > 1 and profile.all_reduce is None:
            self.ops_from_roofline.append("all_reduce")
        self._dense_cache: dict[int, float] = {}
        self._warned = False

    def _check_grid(self, tokens: int) -> None:
        """Warn once per model when a step leaves the measured token grid."""
        if tokens > self.profile.grid_max_tokens and not self._warned:
            self._warned = True
            p = self.profile
            warnings.warn(
                f"table model {p.model}/{p.gpu}/tp{p.tp}: {tokens} tokens is past the "
                f"measured grid (max {p.grid_max_tokens}); operator times are scaled "
                f"linearly from the last measurement",
                ExtrapolationWarning,
                stacklevel=3,
            )

    def layer_ops(self, tokens: int) -> dict[str, float]:
        """Seconds of each token-count-dependent operator of one layer (measured where possible)."""
        rl = self.roofline.dense_ops(tokens)
        ops = self.profile.ops
        out = {op: ops[op](tokens) if op in ops else rl[op] for op in LAYER_OPS}
        out["kv_cache_save"] = rl["kv_cache_save"]
        return out

    def all_reduce(self, tokens: int) -> float:
        """One TP all-reduce of the hidden states: measured by message size, else roofline."""
        if self.roofline.tp == 1:
            return 0.0
        nbytes = tokens * self.model.hidden_size * self.model.dtype_bytes
        curve = self.profile.all_reduce
        return curve(nbytes) if curve is not None else self.roofline.all_reduce(nbytes)

    def collective_time(self, tokens: int) -> float:
        """All layers' TP all-reduces of a step of `tokens` tokens (two per layer)."""
        return self.model.num_layers * 2 * self.all_reduce(tokens)

    def emb(self, tokens: int) -> float:
        """Embedding lookup (once per step)."""
        curve = self.profile.ops.get("emb")
        if curve is not None:
            return curve(tokens)
        return self.roofline.emb(tokens)

    def dense_time(self, tokens: int) -> float:
        """All layers' token-count-dependent work, all-reduces and embedding (cached)."""
        t = self._dense_cache.get(tokens)
        if t is None:
            self._check_grid(tokens)
            per_layer = sum(self.layer_ops(tokens).values()) + 2 * self.all_reduce(tokens)
            t = self._dense_cache[tokens] = self.model.num_layers * per_layer + self.emb(tokens)
        return t

    def step_time(self, shape: StepShape) -> float:
        """Seconds of one GPU step of this shape."""
        prefills, decodes, drafts = shape.prefills, shape.decodes, shape.num_drafts
        if not drafts:
            return self.plain_step_time(prefills, len(decodes), shape.decode_context)
        rl = self.roofline
        attn = rl.prefill_attention(prefills) + rl.decode_attention(decodes, drafts)
        dense = self.dense_time(shape.num_tokens)
        return dense + self.model.num_layers * attn + rl.head_time(shape.num_sampled)

    def plain_step_time(self, prefills: list[tuple[int, int]], num_decodes: int, ctx_sum: int) -> float:
        """step_time of prefill chunks and draft-free decodes given by their count and context sum
        (step_time routes such shapes here: the executor gets the same float without a decode list)."""
        if not prefills:
            return self.decode_step_time(num_decodes, ctx_sum) if num_decodes else 0.0
        tokens = prefill_tokens(prefills) + num_decodes
        if tokens == 0:
            return 0.0
        rl = self.roofline
        decode = rl.plain_decode_attention(num_decodes, ctx_sum) if num_decodes else 0.0
        attn = rl.prefill_attention(prefills) + decode
        return (
            self.dense_time(tokens) + self.model.num_layers * attn + rl.head_time(len(prefills) + num_decodes)
        )

    def decode_step_time(self, num_decodes: int, ctx_sum: int) -> float:
        """step_time of plain decodes from their count and context sum (the fast-forward's path)."""
        rl = self.roofline
        attn = rl.plain_decode_attention(num_decodes, ctx_sum)
        return self.dense_time(num_decodes) + self.model.num_layers * attn + rl.head_time(num_decodes)

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per operator for the whole step (sums to step_time)."""
        tokens = shape.num_tokens
        if tokens == 0:
            return {}
        layers = self.model.num_layers
        out = {k: layers * v for k, v in self.layer_ops(tokens).items()}
        rl = self.roofline.breakdown(shape)
        out["attn_prefill"], out["attn_decode"] = rl["attn_prefill"], rl["attn_decode"]
        out["all_reduce"] = layers * 2 * self.all_reduce(tokens)
        out["emb"] = self.emb(tokens)
        out["lm_head"] = rl["lm_head"]
        return out

    def describe(self) -> dict:
        """Which profile, which operators came from the roofline, and the roofline's factors."""
        p = self.profile
        return {
            "kind": self.name,
            "model": p.model,
            "gpu": p.gpu,
            "tp": p.tp,
            "profile": p.source,
            "grid_max_tokens": p.grid_max_tokens,
            "measured_ops": sorted(p.ops),
            "ops_from_roofline": self.ops_from_roofline,
            "all_reduce": "measured" if p.all_reduce is not None else "roofline",
            "roofline": self.roofline.describe()["roofline"],
        }
