"""Weights: seeded random initialisation, and Hugging Face safetensors checkpoints (load and save)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ModelConfig
from .model import LlamaModel


def init_random_(model: LlamaModel, seed: int = 0) -> LlamaModel:
    """Seeded weights whose logits spread wide enough that greedy argmax has no near-ties."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg

    def fill(p: torch.Tensor, std: float) -> None:
        p.copy_(torch.randn(p.shape, generator=g) * std)

    with torch.no_grad():
        fill(model.embed_tokens, 1.0)
        for layer in model.decoder_layers:
            layer.input_layernorm.fill_(1.0)
            layer.post_attention_layernorm.fill_(1.0)
            fill(layer.qkv_proj, cfg.hidden_size**-0.5)
            fill(layer.o_proj, (cfg.num_attention_heads * cfg.head_dim) ** -0.5)
            fill(layer.gate_up_proj, cfg.hidden_size**-0.5)
            fill(layer.down_proj, cfg.intermediate_size**-0.5)
        model.norm.fill_(1.0)
        if not cfg.tie_word_embeddings:
            fill(model.lm_head, 2.0 * cfg.hidden_size**-0.5)
    return model


def hf_state_dict(model: LlamaModel) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face Llama names (stacked matrices split again)."""
    cfg = model.cfg
    nq = cfg.num_attention_heads * cfg.head_dim
    nk = cfg.num_key_value_heads * cfg.head_dim
    out: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": model.embed_tokens,
        "model.norm.weight": model.norm,
    }
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = model.lm_head
    for i, layer in enumerate(model.decoder_layers):
        p = f"model.layers.{i}."
        q, k, v = layer.qkv_proj.split([nq, nk, nk])
        gate, up = layer.gate_up_proj.chunk(2)
        out |= {
            p + "input_layernorm.weight": layer.input_layernorm,
            p + "post_attention_layernorm.weight": layer.post_attention_layernorm,
            p + "self_attn.q_proj.weight": q,
            p + "self_attn.k_proj.weight": k,
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": layer.o_proj,
            p + "mlp.gate_proj.weight": gate,
            p + "mlp.up_proj.weight": up,
            p + "mlp.down_proj.weight": layer.down_proj,
        }
    return {k: v.detach().contiguous().cpu() for k, v in out.items()}


def save_checkpoint(model: LlamaModel, folder: str | Path) -> Path:
    """Write config.json and model.safetensors in Hugging Face's layout."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.cfg.to_dict(), indent=2))
    save_file(hf_state_dict(model), str(folder / "model.safetensors"))
    return folder


def _checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or the shards an index names."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors file and no model.safetensors.index.json")
    return files


def load_checkpoint(
    folder: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> LlamaModel:
    """Build the model from a local folder with config.json and safetensors weights, strictly.

    Every expected tensor must be present with its exact shape; unknown tensors are an error
    (rotary inv_freq buffers excepted), so a wrong architecture never loads silently.
    """
    from safetensors import safe_open

    folder = Path(folder)
    model = LlamaModel(ModelConfig.from_file(folder / "config.json"), device=device, dtype=dtype)
    expected = hf_state_dict(model)
    if model.cfg.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    loaded: dict[str, torch.Tensor] = {}
    for path in _checkpoint_files(folder):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if name.endswith("rotary_emb.inv_freq"):
                    continue
                if name not in expected and not (name == "lm_head.weight" and model.cfg.tie_word_embeddings):
                    raise ValueError(f"{path}: unexpected tensor {name!r} for a Llama model")
                tensor = f.get_tensor(name)
                if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
                    raise ValueError(
                        f"{path}: tensor {name!r} has shape {tuple(tensor.shape)}, "
                        f"config {folder / 'config.json'} implies {tuple(expected[name].shape)}"
                    )
                loaded[name] = tensor
    missing = sorted(set(expected) - set(loaded))
    if missing:
        raise ValueError(f"{folder}: checkpoint lacks {len(missing)} tensor(s), e.g. {missing[:3]}")
    _assign(model, loaded)
    return model


def _assign(model: LlamaModel, w: dict[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into the stacked parameters."""
    with torch.no_grad():
        model.embed_tokens.copy_(w["model.embed_tokens.weight"])
        model.norm.copy_(w["model.norm.weight"])
        if not model.cfg.tie_word_embeddings:
            model.lm_head.copy_(w["lm_head.weight"])
        for i, layer in enumerate(model.decoder_layers):
            p = f"model.layers.{i}."
            layer.input_layernorm.copy_(w[p + "input_layernorm.weight"])
            layer.post_attention_layernorm.copy_(w[p + "post_attention_layernorm.weight"])
            layer.qkv_proj.copy_(torch.cat([w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]))
            layer.o_proj.copy_(w[p + "self_attn.o_proj.weight"])
            layer.gate_up_proj.copy_(torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]))
            layer.down_proj.copy_(w[p + "mlp.down_proj.weight"])


def build_model(
    cfg: ModelConfig, seed: int = 0, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> LlamaModel:
    """A randomly initialised model (the default: no weights can be downloaded)."""
    model = LlamaModel(cfg, device="cpu", dtype=dtype)
    init_random_(model, seed)
    return model.to(device)
