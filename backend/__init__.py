"""The real backend: a Llama-style model with a paged KV cache and Triton kernels, behind the Executor
protocol of `schedsim.policies`. Imports torch; the simulator imports this package only lazily."""

from .config import PRESETS, ModelConfig, load_model_config
from .executor import ExecutorConfig, RealExecutor, StepHandle
from .kv_cache import PagedKVCache
from .model import LlamaModel
from .sampling import SamplingConfig
from .weights import build_model, init_random_, load_checkpoint, save_checkpoint

__all__ = [
    "PRESETS",
    "ExecutorConfig",
    "LlamaModel",
    "ModelConfig",
    "PagedKVCache",
    "RealExecutor",
    "SamplingConfig",
    "StepHandle",
    "build_model",
    "init_random_",
    "load_checkpoint",
    "load_model_config",
    "save_checkpoint",
]
