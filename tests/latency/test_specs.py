"""Specs, KV-pool sizing and the CPU-cost model."""

import json

import pytest
from schedsim.latency import (
    CpuCostConfig,
    CpuCostModel,
    PhaseCost,
    get_gpu_spec,
    get_model_spec,
    kv_pool_blocks,
    list_gpu_specs,
    list_model_specs,
    model_spec_from_hf_config,
)
from schedsim.latency.memory import GIB, weight_bytes_per_gpu

REQUIRED_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen2.5-7b",
    "llama-2-7b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "codellama-34b",
    "qwen-72b",
    "internlm-20b",
    "phi-2",
    "tiny",
]


def test_shipped_specs_present():
    assert set(REQUIRED_MODELS) <= set(list_model_specs())
    assert {"a100-80gb", "h100-sxm", "h200", "l40s"} <= set(list_gpu_specs())


def test_llama_8b_has_about_8b_params_and_aliases_resolve():
    spec = get_model_spec("llama-3.1-8b")
    assert 7.9e9 < spec.weight_params() < 8.1e9
    assert get_model_spec("meta-llama/Llama-2-7b-hf").name == "llama-2-7b"
    assert 6.6e9 < get_model_spec("llama-2-7b").weight_params() < 6.8e9
    assert 68e9 < get_model_spec("llama-3.1-70b").weight_params() < 72e9
    assert get_gpu_spec("H100").name == "h100-sxm"
    with pytest.raises(KeyError, match="unknown gpu"):
        get_gpu_spec("tpu-v5")


def test_kv_bytes_per_token_gqa_and_tp():
    spec = get_model_spec("llama-3.1-8b")
    assert spec.kv_bytes_per_token(1) == 2 * 32 * 8 * 128 * 2  # 128 KiB per token
    assert spec.kv_bytes_per_token(2) == spec.kv_bytes_per_token(1) // 2
    # tp beyond the KV heads replicates them, as vLLM does
    assert spec.kv_bytes_per_token(16) == spec.kv_bytes_per_token(8)


def test_hf_config_roundtrip(tmp_path):
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 1024,
        "torch_dtype": "float32",
        "hidden_act": "silu",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = model_spec_from_hf_config(tmp_path)
    assert (spec.num_layers, spec.head_dim, spec.dtype_bytes, spec.gated_mlp) == (4, 64, 4, True)
    assert get_model_spec(str(tmp_path / "config.json")).num_key_value_heads == 2
    del cfg["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="vocab_size"):
        model_spec_from_hf_config(tmp_path)


def test_kv_pool_blocks_matches_memory_arithmetic():
    model, gpu = get_model_spec("llama-3.1-8b"), get_gpu_spec("h100-sxm")
    blocks = kv_pool_blocks(model, gpu, tp=1, block_size=16, activation_reserve_gib=2.0)
    free = gpu.memory_gib * GIB * 0.9 - weight_bytes_per_gpu(model, 1) - 2 * GIB
    assert blocks == int(free // (16 * model.kv_bytes_per_token(1)))
    # more TP leaves more room per GPU for KV; higher utilisation too
    assert kv_pool_blocks("llama-3.1-70b", "h100-sxm", 8, 16) > kv_pool_blocks(
        "llama-3.1-70b", "h100-sxm", 4, 16
    )
    assert kv_pool_blocks(model, gpu, 1, 16, 0.95) > blocks


def test_kv_pool_blocks_errors_when_weights_do_not_fit():
    with pytest.raises(ValueError, match="does not fit on h100-sxm at tp=1"):
        kv_pool_blocks("llama-3.1-70b", "h100-sxm", 1, 16)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_pool_blocks("llama-3.1-8b", "h100-sxm", 1, 16, gpu_memory_utilization=1.5)


def test_cpu_cost_model_linear_and_scaled():
    cpu = CpuCostModel()
    a = cpu.phase_time("schedule", 10, 100)
    b = cpu.phase_time("schedule", 20, 100)
    c = cpu.phase_time("schedule", 30, 100)
    assert b > a and c - b == pytest.approx(b - a)
    assert CpuCostModel(scale=2.0).phase_time("prepare_inputs", 8, 64) == pytest.approx(
        2 * cpu.phase_time("prepare_inputs", 8, 64)
    )
    assert CpuCostModel(scale=0.0).step_total(256, 256) == 0.0
    # a few ms per step at large batch (vLLM's public measurements)
    assert 1e-3 < cpu.step_total(256, 256) < 10e-3
    with pytest.raises(ValueError, match="unknown CPU phase"):
        cpu.phase_time("sample", 1, 1)


def test_cpu_cost_config_validation():
    with pytest.raises(ValueError, match="'scale'"):
        CpuCostConfig(scale=-1)
    with pytest.raises(ValueError, match="per_req"):
        PhaseCost(base=0.0, per_req=-1e-6)
    with pytest.raises(ValueError, match="unknown phase"):
        CpuCostConfig.from_dict({"phases": {"sampling": {"base": 1e-5}}})
    cfg = CpuCostConfig.from_dict({"scale": 0.5, "phases": {"schedule": {"base": 1e-4}}})
    assert CpuCostModel(cfg).phase_time("schedule", 0, 0) == pytest.approx(5e-5)
