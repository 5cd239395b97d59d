"""Attention metadata of a mixed batch, and the index checks run before any kernel launch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """Where each sequence's query tokens sit in the flat batch and where its KV pages live.

    Sequence i owns query rows query_start_loc[i]:query_start_loc[i+1]; its KV covers positions
    0..seq_lens[i]-1 (cached context first, then the new tokens) through block_tables[i]. The
    tensors live where the kernels run; the ints are host figures that size the launches.
    """

    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    block_tables: torch.Tensor  # [num_seqs, >= max_blocks] int32 (row stride may exceed the width), 0-padded
    slot_mapping: torch.Tensor  # [num_tokens] int64, -1 = do not store
    max_query_len: int
    max_seq_len: int
    num_decodes: int = -1  # sequences with exactly one query token; -1 = not counted (both kernels run)

    def __post_init__(self) -> None:
        """Reject counts that cannot describe this batch (they size the kernels' grids)."""
        if self.max_query_len < 0 or self.max_seq_len < 0:
            raise ValueError(
                f"AttentionMetadata: max_query_len {self.max_query_len} and max_seq_len "
                f"{self.max_seq_len} must be >= 0"
            )
        if not -1 <= self.num_decodes <= self.num_seqs:
            raise ValueError(
                f"AttentionMetadata.num_decodes must be -1 or 0..{self.num_seqs}, got {self.num_decodes}"
            )

    @property
    def num_seqs(self) -> int:
        """Sequences in the batch."""
        return int(self.seq_lens.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> AttentionMetadata:
        """The same metadata on another device (pinned host tensors copy asynchronously)."""
        return AttentionMetadata(
            self.query_start_loc.to(device, non_blocking=non_blocking),
            self.seq_lens.to(device, non_blocking=non_blocking),
            self.block_tables.to(device, non_blocking=non_blocking),
            self.slot_mapping.to(device, non_blocking=non_blocking),
            self.max_query_len,
            self.max_seq_len,
            self.num_decodes,
        )

    @property
    def device(self) -> torch.device:
        """Where the metadata tensors live (all four, see `check_devices`)."""
        return self.query_start_loc.device


def check_devices(op: str, where: torch.Tensor, **tensors: torch.Tensor) -> None:
    """Raise unless every tensor lives on `where`'s device: a host pointer handed to a CUDA kernel
    fails deep inside Triton ("cannot be accessed from Triton (cpu tensor?)") or reads garbage."""
    for name, tensor in tensors.items():
        if tensor.device != where.device:
            raise ValueError(
                f"{op}: {name} is on {tensor.device} but the data is on {where.device}; "
                "move it first (AttentionMetadata.to(device))"
            )


def metadata_tensors(meta: AttentionMetadata) -> dict[str, torch.Tensor]:
    """The metadata's tensors by name, for `check_devices`."""
    return {
        "query_start_loc": meta.query_start_loc,
        "seq_lens": meta.seq_lens,
        "block_tables": meta.block_tables,
        "slot_mapping": meta.slot_mapping,
    }


def check_block_tables(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int
) -> None:
    """Raise before launch if a page a sequence reads is missing or outside the cache.

    An out-of-range index inside a Triton kernel corrupts memory on a GPU and kills the process
    under the interpreter, so this runs on host copies before every launch.
    """
    bt = block_tables.detach().cpu()
    lens = seq_lens.detach().cpu().tolist()
    if bt.dim() != 2 or bt.shape[0] != len(lens):
        raise ValueError(f"block_tables must be [num_seqs={len(lens)}, max_blocks], got {tuple(bt.shape)}")
    for i, seq_len in enumerate(lens):
        need = -(-int(seq_len) // block_size)
        if need > bt.shape[1]:
            raise ValueError(f"sequence {i}: seq_len {seq_len} needs {need} blocks, table has {bt.shape[1]}")
        used = bt[i, :need]
        if need and (int(used.min()) < 1 or int(used.max()) >= num_blocks):
            raise ValueError(
                f"sequence {i}: block ids {used.tolist()} outside 1..{num_blocks - 1} "
                "(block 0 is the null block)"
            )


def check_slot_mapping(slot_mapping: torch.Tensor, num_blocks: int, block_size: int) -> None:
    """Raise if a slot lies outside the cache or inside the null block (-1 means skip)."""
    slots = slot_mapping.detach().cpu()
    valid = slots[slots >= 0]
    if bool((slots < -1).any()):
        raise ValueError(f"slot_mapping has values below -1: {slots[slots < -1].tolist()[:8]}")
    if valid.numel() and (int(valid.min()) < block_size or int(valid.max()) >= num_blocks * block_size):
        raise ValueError(
            f"slot_mapping values must lie in {block_size}..{num_blocks * block_size - 1}, got "
            f"min {int(valid.min())} max {int(valid.max())}"
        )
