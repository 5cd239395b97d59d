"""The paged KV cache as real tensors, indexed by the block ids the policy's KV manager hands out."""

from __future__ import annotations

import torch

from .config import ModelConfig


class PagedKVCache:
    """Per layer a key and a value tensor [num_blocks, block_size, kv_heads, head_dim].

    Block 0 is the null block (never handed to a request); a block shared by prefix caching is
    read by every request whose table names it, so cached context is real memory, not a count.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"PagedKVCache.num_blocks must be >= 2 (block 0 is the null block), got {num_blocks}"
            )
        if block_size < 1:
            raise ValueError(f"PagedKVCache.block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(cfg.num_hidden_layers)
        ]

    @property
    def nbytes(self) -> int:
        """Memory held by all layers' K and V."""
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.layers)

    def slot(self, block_table: list[int], position: int) -> int:
        """Flat slot of a token position: its page's block id times block_size plus the offset."""
        return block_table[position // self.block_size] * self.block_size + position % self.block_size

    def slots(self, block_table: list[int], start: int, end: int) -> list[int]:
        """Slots of positions start..end-1 (the tokens a step writes)."""
        bs = self.block_size
        return [block_table[p // bs] * bs + p % bs for p in range(start, end)]

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks (source -> destination) in every layer, on the current stream."""
        for src, dst in pairs:
            if not (1 <= src < self.num_blocks and 1 <= dst < self.num_blocks):
                raise ValueError(f"block copy {src} -> {dst} outside 1..{self.num_blocks - 1}")
        if not pairs:
            return
        device = self.layers[0][0].device
        src_ids = torch.tensor([s for s, _ in pairs], dtype=torch.int64, device=device)
        dst_ids = torch.tensor([d for _, d in pairs], dtype=torch.int64, device=device)
        for k, v in self.layers:
            k.index_copy_(0, dst_ids, k.index_select(0, src_ids))
            v.index_copy_(0, dst_ids, v.index_select(0, src_ids))

    def check_table(self, request_id: str, block_table: list[int], num_tokens: int) -> None:
        """Raise, naming the request, unless the table covers num_tokens with real blocks."""
        need = -(-num_tokens // self.block_size)
        if len(block_table) < need:
            raise ValueError(
                f"request {request_id}: block table has {len(block_table)} blocks, "
                f"{num_tokens} tokens need {need} (block_size {self.block_size})"
            )
        bad = [b for b in block_table[:need] if not 1 <= b < self.num_blocks]
        if bad:
            raise ValueError(
                f"request {request_id}: block ids {bad} outside 1..{self.num_blocks - 1} "
                "(block 0 is the null block)"
            )
