"""SchedulerConfig: the knobs every policy shares; policies extend it by dataclass inheritance."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass
class SchedulerConfig:
    """Shared scheduler and KV-cache knobs, named as in vLLM's SchedulerConfig/CacheConfig."""

    block_size: int = 16
    num_gpu_blocks: int = 4096  # the whole pool, null block included
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    scheduling_policy: str = "fcfs"
    num_spec_tokens: int = 0

    def __post_init__(self) -> None:
        """Reject impossible configs with the field's name."""
        for name in (
            "block_size",
            "num_gpu_blocks",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpu_blocks < 2:
            raise ValueError(f"{type(self).__name__}.num_gpu_blocks must be >= 2 (block 0 is the null block)")
        if self.long_prefill_token_threshold < 0 or self.num_spec_tokens < 0:
            raise ValueError(
                f"{type(self).__name__}: long_prefill_token_threshold and num_spec_tokens must be >= 0"
            )
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(
                f"{type(self).__name__}.scheduling_policy must be one of "
                f"{SCHEDULING_POLICIES}, got {self.scheduling_policy!r}"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"{type(self).__name__}: without chunked prefill max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len})"
            )
