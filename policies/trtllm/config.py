"""TrtllmConfig: TensorRT-LLM scheduler knobs on top of the shared SchedulerConfig."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig
from .chunking import ChunkingPolicy

CHUNKING_POLICIES = tuple(p.value for p in ChunkingPolicy)


@dataclass
class TrtllmConfig(SchedulerConfig):
    """TensorRT-LLM names; None means 'take the shared (vLLM-named) field'.

    max_batch_size -> max_num_seqs, max_num_tokens -> max_num_batched_tokens,
    max_input_len -> max_model_len - 1, chunk_unit_size -> block_size. Chunking is on when
    enable_chunked_prefill is, block reuse when enable_prefix_caching is; the capacity policy is
    fixed by the registered policy name. The KV pool has num_gpu_blocks - 1 usable blocks.
    """

    chunking_policy: str = ChunkingPolicy.FIRST_COME_FIRST_SERVED.value
    chunk_unit_size: int | None = None
    enable_prefix_aware_scheduling: bool = True
    two_step_lookahead: bool = False
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    max_input_len: int | None = None
    # Variable sliding-window attention: prefix-aware skipping and reuse estimates are off.
    variable_window_attention: bool = False
    # LoRA adapter pages (PEFT cache); None: unlimited.
    max_peft_pages: int | None = None
    peft_pages_per_adapter: int = 1
    # force-chunk: expected state-snapshot points every this many tokens, as a linear-attention
    # (Mamba) cache manager sets them; None: none (a transformer's KV cache), a chunk is the remainder.
    snapshot_interval: int | None = None
    # Pipeline micro-batches in flight (inflight_request_ids): >1 lets the engine queue batches; a
    # request in flight is skipped by the micro-batch scheduler and never paused.
    num_micro_batches: int = 1
    # KvCacheConfig: reuse a common prefix inside a block (copying it into a fresh block when the
    # matched block is held or continued by others).
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    # Not TensorRT-LLM: no-evict and static batch schedule contexts past their first chunk in the
    # first pass with the generations, instead of behind new contexts in the second (where a new
    # context that misses on blocks can hold them back for ever: TensorRT-LLM's wedge).
    started_contexts_in_first_pass: bool = False

    def __post_init__(self) -> None:
        """Check each TensorRT-LLM field, naming it."""
        super().__post_init__()
        name = type(self).__name__
        if self.chunking_policy not in CHUNKING_POLICIES:
            raise ValueError(
                f"{name}.chunking_policy must be one of {CHUNKING_POLICIES}, got {self.chunking_policy!r}"
            )
        if self.num_micro_batches < 1:
            raise ValueError(f"{name}.num_micro_batches must be >= 1, got {self.num_micro_batches}")
        for field_name in (
            "chunk_unit_size",
            "max_batch_size",
            "max_num_tokens",
            "max_input_len",
            "snapshot_interval",
        ):
            value = getattr(self, field_name)
            if value is not None and value < 1:
                raise ValueError(f"{name}.{field_name} must be >= 1 (or None), got {value}")
        if self.max_peft_pages is not None and self.max_peft_pages < 0:
            raise ValueError(f"{name}.max_peft_pages must be >= 0 (or None), got {self.max_peft_pages}")
        if self.peft_pages_per_adapter < 0:
            raise ValueError(f"{name}.peft_pages_per_adapter must be >= 0, got {self.peft_pages_per_adapter}")
        if self.effective_max_input_len >= self.max_model_len:
            raise ValueError(
                f"{name}.max_input_len ({self.effective_max_input_len}) must be < "
                f"max_model_len ({self.max_model_len}): one output token must fit"
            )
        if not self.enable_chunked_prefill and self.effective_max_num_tokens < self.effective_max_input_len:
            raise ValueError(
                f"{name}: without chunking max_num_tokens ({self.effective_max_num_tokens}) "
                f"must be >= max_input_len ({self.effective_max_input_len})"
            )
        if self.effective_chunk_unit % self.block_size:
            # a non-last chunk must end on a block boundary (setPrepopulatedPromptLen checks it)
            raise ValueError(
                f"{name}.chunk_unit_size ({self.effective_chunk_unit}) must be a multiple of "
                f"block_size ({self.block_size})"
            )
        if self.enable_chunked_prefill and self.effective_max_num_tokens < self.effective_chunk_unit:
            # a trimmed chunk is floored to the unit: a budget below one unit never schedules a long prompt
            raise ValueError(
                f"{name}.chunk_unit_size ({self.effective_chunk_unit}) exceeds max_num_tokens "
                f"({self.effective_max_num_tokens})"
            )

    @property
    def effective_max_batch_size(self) -> int:
        """Micro-batch request cap."""
        return self.max_batch_size if self.max_batch_size is not None else self.max_num_seqs

    @property
    def effective_max_num_tokens(self) -> int:
        """Micro-batch token budget (also the max context length)."""
        return self.max_num_tokens if self.max_num_tokens is not None else self.max_num_batched_tokens

    @property
    def effective_max_input_len(self) -> int:
        """Longest prompt accepted, and the cap a pause folds generated tokens into."""
        return self.max_input_len if self.max_input_len is not None else self.max_model_len - 1

    @property
    def effective_chunk_unit(self) -> int:
        """Chunks are floored to this (a KV block by default, to avoid fragmentation)."""
        return self.chunk_unit_size if self.chunk_unit_size is not None else self.block_size
