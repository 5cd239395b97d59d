"""Block shapes, warps and pipelining depth of the attention kernels, and when decode splits its KV.

Chosen on the host from shapes alone (no autotuning: an autotuner would compile and time variants
inside a timed step). `bench/gpu_check.py` times alternatives on a GPU and reports the best."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

LOG2E = 1.4426950408889634  # the kernels use exp2: scores are pre-scaled by log2(e)


def _pow2(n: int) -> bool:
    """True for 1, 2, 4, ... (tl.arange and tl.dot need power-of-two extents)."""
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class AttentionTuning:
    """Launch parameters; 16-bit defaults suit Hopper (BLOCK_M >= 64 lets Triton emit wgmma)."""

    prefill_block_m: int = 128  # (token, query head) rows per prefill program
    prefill_block_n: int = 64  # keys per tile, independent of the page size
    prefill_warps: int = 8
    prefill_stages: int = 3
    decode_block_n: int = 64  # keys per decode tile
    decode_warps: int = 4
    decode_stages: int = 3
    num_sms: int = 0  # programs that fill the GPU once; 0 = read from the device (132 off CUDA)
    min_keys_per_split: int = 256  # a decode split never reads fewer keys than this
    max_splits: int = 32

    def __post_init__(self) -> None:
        """Reject extents Triton cannot tile, naming the field."""
        for name in ("prefill_block_m", "prefill_block_n", "decode_block_n"):
            value = getattr(self, name)
            if not _pow2(value) or value < 16:
                raise ValueError(f"AttentionTuning.{name} must be a power of two >= 16, got {value}")
        for name in ("prefill_warps", "decode_warps"):
            if getattr(self, name) not in (1, 2, 4, 8, 16):
                raise ValueError(
                    f"AttentionTuning.{name} must be 1, 2, 4, 8 or 16, got {getattr(self, name)}"
                )
        for name in ("prefill_stages", "decode_stages", "min_keys_per_split", "max_splits"):
            if getattr(self, name) < 1:
                raise ValueError(f"AttentionTuning.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_sms < 0:
            raise ValueError(f"AttentionTuning.num_sms must be >= 0, got {self.num_sms}")


def block_d(head_dim: int) -> int:
    """Padded head dimension: a power of two, at least 16 (tl.dot's smallest K)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def rows_per_program(block_m: int, group: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q): rows are (token, query head) pairs, so a tile holds BLOCK_Q tokens of
    every head in the group; BLOCK_M grows when the group alone is larger."""
    block_m = max(block_m, 1 << (group - 1).bit_length())
    return block_m, block_m // group


def prefill_params(tuning: AttentionTuning, head_dim: int, group: int, dtype: torch.dtype) -> dict[str, int]:
    """BLOCK_M, BLOCK_Q, BLOCK_N, num_warps, num_stages for the prefill kernel at this shape (the
    same on sm_80 and sm_90: the AOT check compiles both without spills)."""
    block_m, warps, stages = tuning.prefill_block_m, tuning.prefill_warps, tuning.prefill_stages
    block_n = min(tuning.prefill_block_n, max(32, block_d(head_dim)))  # small heads: narrower key tiles
    if dtype == torch.float32:  # 3xTF32 holds each operand twice: 32 rows, no pipelining, or it spills
        block_m, block_n, warps, stages = 32, 32, 4, 1
    if block_d(head_dim) > 128:
        block_n = max(16, block_n // 2)
    block_m, block_q = rows_per_program(block_m, group)
    return {
        "BLOCK_M": block_m,
        "BLOCK_Q": block_q,
        "BLOCK_N": block_n,
        "num_warps": warps,
        "num_stages": stages,
    }


def decode_params(tuning: AttentionTuning, head_dim: int, group: int, dtype: torch.dtype) -> dict[str, int]:
    """BLOCK_M (the group's heads, padded to 16), BLOCK_N, num_warps, num_stages for decode."""
    block_n, stages = tuning.decode_block_n, tuning.decode_stages
    if dtype == torch.float32:  # 4-byte tiles: half as wide, two stages
        block_n, stages = 32, 2
    elif block_d(head_dim) > 128:
        block_n, stages = max(16, block_n // 2), min(stages, 2)
    block_m, _ = rows_per_program(16, group)
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": tuning.decode_warps, "num_stages": stages}


@lru_cache(maxsize=8)
def _device_sms(index: int) -> int:
    """Multiprocessors of a CUDA device (cached: the query costs a driver call)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(tuning: AttentionTuning, device: torch.device) -> int:
    """Programs that fill the GPU once: the tuning's figure, the device's, or an H100's 132."""
    if tuning.num_sms:
        return tuning.num_sms
    if device.type == "cuda":
        return _device_sms(device.index if device.index is not None else torch.cuda.current_device())
    return 132


def num_splits(tuning: AttentionTuning, num_decodes: int, kv_heads: int, max_seq_len: int, sms: int) -> int:
    """KV splits per decode so that small batches still fill two waves of programs; 1 for large ones."""
    programs = max(1, num_decodes) * kv_heads
    want = -(-2 * sms // programs)
    most = max(1, max_seq_len // tuning.min_keys_per_split)
    return max(1, min(want, most, tuning.max_splits))
