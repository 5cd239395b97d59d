"""A KV pool too small for one max_model_len sequence: the error says which flag fixes it."""

from __future__ import annotations

import pytest
from schedsim.run.config import RunConfig
from schedsim.run.resolve import check_config
from schedsim.run.toml_config import ConfigError

pytestmark = pytest.mark.pure_python


def test_small_pool_suggests_max_model_len() -> None:
    with pytest.raises(ConfigError) as err:
        check_config(RunConfig(policy="vllm", num_gpu_blocks=3000))
    msg = str(err.value)
    assert "--max-model-len 47984 or less" in msg  # (3000 - 1 null block) x 16 tokens
    assert "default: llama-3.1-8b's context length" in msg


def test_suggested_max_model_len_fits() -> None:
    check_config(RunConfig(policy="vllm", num_gpu_blocks=3000, max_model_len=47984))
    with pytest.raises(ConfigError, match="max_model_len is 47985: pass --max-model-len 47984"):
        check_config(RunConfig(policy="vllm", num_gpu_blocks=3000, max_model_len=47985))
