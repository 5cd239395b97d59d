"""Dtypes: bf16 by default on CUDA (the tensor-core path), fp32 on a CPU, `--real-dtype` to choose;
and a bf16 end-to-end check of Llama-shaped layers (head_dim 128, grouped queries) against the dense
fp32 forward of the same weights."""

from __future__ import annotations

import argparse

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, ModelConfig, build_model  # noqa: E402
from schedsim.backend.dtypes import resolve_dtype  # noqa: E402
from schedsim.backend.forward_check import TOLERANCE, check_paged_forward  # noqa: E402
from schedsim.backend.kernels import get_ops, triton_status  # noqa: E402

# Llama-3 attention geometry (head_dim 128, four query heads per KV head), narrower and shallower.
LLAMA_SHAPED = dict(
    vocab_size=512,
    hidden_size=1024,
    intermediate_size=3584,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=2,
    rope_theta=500000.0,
    max_position_embeddings=256,
)


def test_default_dtype_is_bf16_on_cuda_and_fp32_on_cpu():
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("fp16", torch.device("cuda")) == torch.float16
    assert resolve_dtype("float32", torch.device("cuda")) == torch.float32
    assert ExecutorConfig(dtype="bf16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="ExecutorConfig.dtype: unknown dtype 'int8'"):
        ExecutorConfig(dtype="int8")


def test_real_dtype_flag_reaches_the_executor():
    from schedsim.cli.backend import add_backend_arguments, backend_options

    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)
    cfg = ExecutorConfig(**backend_options(parser.parse_args(["--real-dtype", "bf16"])))
    assert cfg.dtype == "bfloat16"
    assert ExecutorConfig(**backend_options(parser.parse_args([]))).dtype is None  # the device decides
    with pytest.raises(SystemExit):
        parser.parse_args(["--real-dtype", "int8"])


@pytest.fixture(scope="module")
def llama_shaped():
    return build_model(
        ModelConfig.from_dict(LLAMA_SHAPED, source="llama-shaped"), seed=3, dtype=torch.bfloat16
    )


def tokens(n: int) -> torch.Tensor:
    return torch.randint(0, LLAMA_SHAPED["vocab_size"], (n,), generator=torch.Generator().manual_seed(0))


def test_bf16_reference_path_matches_dense_fp32_at_bf16_tolerance(llama_shaped):
    check = check_paged_forward(llama_shaped, get_ops("torch"), tokens(34), [24, 8, 1, 1])
    assert check.rel_err < TOLERANCE[torch.bfloat16]
    assert check.max_abs_err > 0  # bf16 really rounded something: the check is not vacuous
    assert check.argmax_agreement >= 0.9


@pytest.mark.skipif(not triton_status()[0], reason=f"Triton kernels skipped: {triton_status()[1]}")
@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the gpu tests run the full-size check")
def test_bf16_triton_kernels_match_dense_fp32_at_bf16_tolerance(llama_shaped):
    """The same check on the Triton kernels (interpreted here: a short sequence, two layers)."""
    cfg = ModelConfig.from_dict(LLAMA_SHAPED | {"num_hidden_layers": 2}, source="llama-shaped")
    model = build_model(cfg, seed=3, dtype=torch.bfloat16)
    check = check_paged_forward(model, get_ops("triton"), tokens(19), [17, 1, 1])
    assert 0 < check.rel_err < TOLERANCE[torch.bfloat16]


def test_a_wrong_kernel_fails_the_forward_check(llama_shaped, monkeypatch):
    """Control: attention that ignores the cached prefix is far outside the tolerance."""
    from schedsim.backend.kernels import TorchOps
    from schedsim.backend.kernels import reference as ref

    def forgetful(q, key_cache, value_cache, meta, scale):
        meta.seq_lens = meta.query_start_loc[1:] - meta.query_start_loc[:-1]
        return ref.paged_attention_ref(q, key_cache, value_cache, meta, scale)

    monkeypatch.setattr(TorchOps, "paged_attention", staticmethod(forgetful))
    check = check_paged_forward(llama_shaped, TorchOps(), tokens(34), [24, 8, 1, 1])
    assert check.rel_err > 5 * TOLERANCE[torch.bfloat16]
