"""Latency and CPU-cost models: how long a simulated GPU step and each CPU phase take."""

from .base import LatencyModel, StepShape
from .cpu_cost import CPU_PHASES, CpuCostConfig, CpuCostModel, PhaseCost
from .factory import KINDS, make_latency_model
from .memory import kv_pool_blocks, weight_bytes_per_gpu
from .roofline import RooflineConfig, RooflineModel
from .specs import (
    GpuSpec,
    ModelSpec,
    get_gpu_spec,
    get_model_spec,
    list_gpu_specs,
    list_model_specs,
    model_spec_from_hf_config,
)

__all__ = [
    "CPU_PHASES", "KINDS", "CpuCostConfig", "CpuCostModel", "GpuSpec", "LatencyModel", "ModelSpec",
    "PhaseCost", "RooflineConfig", "RooflineModel", "StepShape", "get_gpu_spec", "get_model_spec",
    "kv_pool_blocks", "list_gpu_specs", "list_model_specs", "make_latency_model",
    "model_spec_from_hf_config", "weight_bytes_per_gpu",
]
