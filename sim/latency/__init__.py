"""Latency and CPU-cost models: how long a simulated GPU step and each CPU phase take."""

from .base import LatencyModel, StepShape
from .cpu_calibrate import calibrate_cpu_costs
from .cpu_cost import CPU_PHASES, CpuCostConfig, CpuCostModel, PhaseCost, load_cpu_cost
from .engines import ENGINE_PROFILES, EngineProfile, OverheadTerms, get_engine_profile, resolve_terms
from .factory import ENGINES, KINDS, make_cpu_cost_model, make_latency_model, read_calibration
from .fitted import FittedStepModel, fit_step_model, read_step_csv
from .interp import ExtrapolationWarning
from .memory import kv_pool_blocks, weight_bytes_per_gpu
from .overhead import OverheadModel
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
from .table import TableModel, TableProfile

__all__ = [
    "CPU_PHASES",
    "ENGINES",
    "ENGINE_PROFILES",
    "KINDS",
    "CpuCostConfig",
    "CpuCostModel",
    "EngineProfile",
    "ExtrapolationWarning",
    "FittedStepModel",
    "GpuSpec",
    "LatencyModel",
    "ModelSpec",
    "OverheadModel",
    "OverheadTerms",
    "PhaseCost",
    "RooflineConfig",
    "RooflineModel",
    "StepShape",
    "TableModel",
    "TableProfile",
    "calibrate_cpu_costs",
    "fit_step_model",
    "get_engine_profile",
    "get_gpu_spec",
    "get_model_spec",
    "kv_pool_blocks",
    "list_gpu_specs",
    "list_model_specs",
    "load_cpu_cost",
    "make_cpu_cost_model",
    "make_latency_model",
    "model_spec_from_hf_config",
    "read_calibration",
    "read_step_csv",
    "resolve_terms",
    "weight_bytes_per_gpu",
]
