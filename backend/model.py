"""A Llama-style decoder (RMSNorm, rotary, GQA, SwiGLU) over a paged KV cache, plus a dense reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .dtypes import DTYPES
from .kernels import AttentionMetadata, Ops
from .kernels.reference import rotary_cos_sin


class DecoderLayer(nn.Module):
    """One layer; q/k/v and gate/up are stacked into single matrices, as vLLM loads them."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * d

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)

        self.input_layernorm = param(h)
        self.qkv_proj = param(qkv, h)
        self.o_proj = param(h, cfg.num_attention_heads * d)
        self.post_attention_layernorm = param(h)
        self.gate_up_proj = param(2 * cfg.intermediate_size, h)
        self.down_proj = param(h, cfg.intermediate_size)


class LlamaModel(nn.Module):
    """Weights and two forwards: the paged one the executor runs, and a dense one for validation."""

    cos_sin: torch.Tensor  # a registered buffer

    def __init__(
        self, cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.cfg = cfg
        device = torch.device(device)
        self.dtype = dtype or DTYPES[cfg.torch_dtype]
        self.embed_tokens = nn.Parameter(
            torch.empty(cfg.vocab_size, cfg.hidden_size, dtype=self.dtype, device=device), requires_grad=False
        )
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, self.dtype, device) for _ in range(cfg.num_hidden_layers)
        )
        self.norm = nn.Parameter(
            torch.empty(cfg.hidden_size, dtype=self.dtype, device=device), requires_grad=False
        )
        self.lm_head = (
            self.embed_tokens
            if cfg.tie_word_embeddings
            else nn.Parameter(
                torch.empty(cfg.vocab_size, cfg.hidden_size, dtype=self.dtype, device=device),
                requires_grad=False,
            )
        )
        self.register_buffer(
            "cos_sin",
            rotary_cos_sin(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta).to(device),
            persistent=False,
        )
        self.scale = cfg.head_dim**-0.5

    @property
    def decoder_layers(self) -> Sequence[DecoderLayer]:
        """The layers, typed (iterating an nn.ModuleList yields plain Modules)."""
        return cast("Sequence[DecoderLayer]", self.layers)

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return self.embed_tokens.device

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of q [T, Hq, D], k and v [T, Hk, D] into the stacked projection output."""
        c = self.cfg
        nq, nk, d = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.head_dim
        q, k, v = qkv.split([nq, nk, nk], dim=-1)
        return (
            q.reshape(-1, c.num_attention_heads, d),
            k.reshape(-1, c.num_key_value_heads, d),
            v.reshape(-1, c.num_key_value_heads, d),
        )

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        ops: Ops,
    ) -> torch.Tensor:
        """Hidden states [T, H] of a flat mixed batch; writes the new tokens' K/V into the cache."""
        x = F.embedding(input_ids, self.embed_tokens)
        residual: torch.Tensor | None = None
        for layer, (k_cache, v_cache) in zip(self.decoder_layers, kv_caches, strict=True):
            h, residual = ops.rms_norm(x, layer.input_layernorm, self.cfg.rms_norm_eps, residual)
            q, k, v = self._split_qkv(F.linear(h, layer.qkv_proj))
            q, k = ops.rotary(positions, q.contiguous(), k.contiguous(), self.cos_sin)
            ops.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            attn = ops.paged_attention(q, k_cache, v_cache, meta, self.scale)
            x = F.linear(attn.reshape(attn.shape[0], -1), layer.o_proj)
            h, residual = ops.rms_norm(x, layer.post_attention_layernorm, self.cfg.rms_norm_eps, residual)
            x = F.linear(ops.silu_and_mul(F.linear(h, layer.gate_up_proj)), layer.down_proj)
        out, _ = ops.rms_norm(x, self.norm, self.cfg.rms_norm_eps, residual)
        return out

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits of the rows that sample."""
        return F.linear(hidden, self.lm_head).float()

    @torch.inference_mode()
    def dense_logits(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits [L, V] of one whole sequence with no KV cache: an independent plain-torch path."""
        c = self.cfg
        x = self.embed_tokens[token_ids.long()].float()
        seq = x.shape[0]
        cs = self.cos_sin[:seq].float()
        half = c.head_dim // 2
        cos, sin = cs[:, None, :half].repeat(1, 1, 2), cs[:, None, half:].repeat(1, 1, 2)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()

        def norm(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps) * w.float()

        def rope(t: torch.Tensor) -> torch.Tensor:
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

        for layer in self.decoder_layers:
            q, k, v = self._split_qkv(norm(x, layer.input_layernorm) @ layer.qkv_proj.float().T)
            q, k = rope(q), rope(k)
            k = k.repeat_interleave(c.num_queries_per_kv, 1)
            v = v.repeat_interleave(c.num_queries_per_kv, 1)
            attn = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=causal, scale=self.scale
            )
            x = x + attn.transpose(0, 1).reshape(seq, -1) @ layer.o_proj.float().T
            gate, up = (norm(x, layer.post_attention_layernorm) @ layer.gate_up_proj.float().T).chunk(2, -1)
            x = x + (F.silu(gate) * up) @ layer.down_proj.float().T
        return norm(x, self.norm) @ self.lm_head.float().T

    def greedy_reference(
        self, prompt: list[int], max_tokens: int, eos_token_id: int | None = None
    ) -> list[int]:
        """Greedy continuation by re-running the dense forward on the whole sequence each token."""
        tokens = list(prompt)
        out: list[int] = []
        for _ in range(max_tokens):
            nxt = int(self.dense_logits(torch.tensor(tokens, device=self.device))[-1].argmax())
            out.append(nxt)
            tokens.append(nxt)
            if nxt == eos_token_id:
                break
        return out
