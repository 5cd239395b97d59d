"""KV-pool sizing: how many cache blocks fit next to the weights, as vLLM's memory profiling does."""

from __future__ import annotations

from .specs import GpuSpec, ModelSpec, get_gpu_spec, get_model_spec

GIB = 1024**3
# Peak activations of the profiling run plus CUDA graphs and NCCL/non-torch memory; vLLM logs put
# this at 1-3 GiB per GPU for 7B-70B models at the default max_num_batched_tokens.
DEFAULT_ACTIVATION_RESERVE_GIB = 2.0


def weight_bytes_per_gpu(model: ModelSpec, tp: int) -> int:
    """Weight bytes one rank holds: layers, embedding and LM head are all sharded by TP."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    return model.weight_params() * model.dtype_bytes // tp


def kv_pool_blocks(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    tp: int,
    block_size: int,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_gib: float = DEFAULT_ACTIVATION_RESERVE_GIB,
) -> int:
    """KV blocks per GPU: (memory x utilisation - weights/TP - activations) / bytes per block."""
    model, gpu = get_model_spec(model), get_gpu_spec(gpu)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if activation_reserve_gib < 0:
        raise ValueError(f"activation_reserve_gib must be >= 0, got {activation_reserve_gib}")
    budget = gpu.memory_gib * GIB * gpu_memory_utilization
    weights = weight_bytes_per_gpu(model, tp)
    free = budget - weights - activation_reserve_gib * GIB
    if free <= 0:
        raise ValueError(
            f"{model.name} does not fit on {gpu.name} at tp={tp}: weights need "
            f"{weights / GIB:.1f} GiB per GPU + {activation_reserve_gib:.1f} GiB activations, "
            f"but {gpu_memory_utilization:.2f} x {gpu.memory_gib:.1f} GiB = {budget / GIB:.1f} GiB "
            f"is available; raise tp or gpu_memory_utilization"
        )
    blocks = int(free // (block_size * model.kv_bytes_per_token(tp)))
    if blocks < 1:
        raise ValueError(f"{model.name} on {gpu.name} at tp={tp}: no room for a single KV block")
    return blocks
