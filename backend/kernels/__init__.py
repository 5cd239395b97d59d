"""Kernels: Triton implementations and their torch references behind one `Ops` interface."""

from .metadata import AttentionMetadata, check_block_tables, check_slot_mapping
from .ops import Ops, TorchOps, get_ops, triton_status

__all__ = [
    "AttentionMetadata",
    "Ops",
    "TorchOps",
    "check_block_tables",
    "check_slot_mapping",
    "get_ops",
    "triton_status",
]
