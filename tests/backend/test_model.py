"""Model config, weights (random and safetensors), sampling, and the paged forward vs the dense one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ModelConfig, PagedKVCache, build_model, load_checkpoint, save_checkpoint  # noqa: E402
from schedsim.backend.config import load_model_config  # noqa: E402
from schedsim.backend.kernels import TorchOps  # noqa: E402
from schedsim.backend.sampling import SamplingConfig, sample, top_p_filter  # noqa: E402
from support.backend import make_batch, max_err  # noqa: E402

TINY = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


def test_config_reads_hf_json_and_names_bad_fields(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY | {"architectures": ["LlamaForCausalLM"], "rope_theta": 5e5}))
    cfg = ModelConfig.from_file(tmp_path)
    assert (cfg.head_dim, cfg.num_queries_per_kv, cfg.rope_theta) == (8, 2, 5e5)
    assert ModelConfig.from_dict(cfg.to_dict()) == ModelConfig.from_dict(cfg.to_dict())
    path.write_text(json.dumps(TINY | {"num_key_value_heads": 3}))
    with pytest.raises(ValueError, match="config.json.*num_key_value_heads 3"):
        ModelConfig.from_file(path)
    path.write_text(json.dumps(TINY | {"hidden_size": "32"}))
    with pytest.raises(ValueError, match="config.json: field 'hidden_size' must be int"):
        ModelConfig.from_file(path)
    path.write_text('{"hidden_size": 32,\n "vocab_size": }')
    with pytest.raises(ValueError, match=r"config.json:2: invalid JSON"):
        ModelConfig.from_file(path)
    with pytest.raises(ValueError, match="not a preset"):
        load_model_config("no-such-model")
    assert load_model_config("tiny").num_params > 0


def test_safetensors_checkpoint_round_trip_and_strict_loading(tmp_path):
    model = build_model(ModelConfig.from_dict(TINY), seed=3)
    save_checkpoint(model, tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt")
    tokens = torch.tensor([5, 9, 1, 44, 7])
    assert torch.equal(loaded.dense_logits(tokens), model.dense_logits(tokens))
    other = build_model(ModelConfig.from_dict(TINY), seed=4)
    assert not torch.equal(other.dense_logits(tokens), model.dense_logits(tokens))
    # A checkpoint for a different shape is refused with the tensor's name.
    bad = json.loads((tmp_path / "ckpt" / "config.json").read_text()) | {"intermediate_size": 40}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"mlp\.\w+_proj\.weight' has shape"):
        load_checkpoint(tmp_path / "ckpt")


def test_paged_forward_in_chunks_matches_dense_forward():
    """Prefill a sequence in three chunks over the paged cache; every row's logits match the dense run."""
    cfg = ModelConfig.from_dict(TINY)
    model = build_model(cfg, seed=1)
    cache = PagedKVCache(cfg, num_blocks=16, block_size=4)
    tokens = torch.randint(0, cfg.vocab_size, (13,), generator=torch.Generator().manual_seed(0))
    dense = model.dense_logits(tokens)
    table = [7, 3, 11, 5]
    for start, end in ((0, 5), (5, 6), (6, 13)):
        meta = make_batch([(start, end - start)], page=4, num_blocks=16)
        meta.block_tables = torch.tensor([table], dtype=torch.int32)
        meta.slot_mapping = torch.tensor(cache.slots(table, start, end))
        hidden = model(tokens[start:end], torch.arange(start, end), cache.layers, meta, TorchOps())
        assert max_err(model.compute_logits(hidden), dense[start:end]) < 1e-4


def test_greedy_and_seeded_top_p_sampling():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    assert sample(logits, ["a", "b"], [4, 9], SamplingConfig()).tolist() == [1, 0]
    hot = SamplingConfig(temperature=1.0, top_p=1.0, seed=7)
    draws = [sample(logits[:1], ["a"], [p], hot).item() for p in range(200)]
    assert draws == [sample(logits[:1], ["a"], [p], hot).item() for p in range(200)]  # seeded
    assert {1, 3} <= set(draws)  # a real distribution, not the argmax
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert torch.equal(top_p_filter(probs, 0.7), probs * torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert torch.equal(top_p_filter(probs, 0.5), probs * torch.tensor([1.0, 0.0, 0.0, 0.0]))
    nucleus = SamplingConfig(temperature=1.0, top_p=0.5, seed=7)
    assert {sample(logits[:1], ["a"], [p], nucleus).item() for p in range(50)} <= {1, 3}
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
