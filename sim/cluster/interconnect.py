"""Interconnect specs for KV transfers between replicas, and the KV bytes a transfer moves.

Each replica's GPUs reach the other replicas through a NIC (or NVLink port) per GPU with the
spec's bandwidth in each direction; a transfer also pays the spec's fixed latency once. The
datasheet figures (per direction, per GPU):

| name | bandwidth | latency | source |
|---|---|---|---|
| `nvlink` | 450 GB/s | 2 µs | H100 SXM: NVLink 900 GB/s total, both directions |
| `ib-400g` / `rdma-400g` | 50 GB/s | 5 µs | ConnectX-7 NDR InfiniBand, 400 Gb/s per port |
| `ib-200g` / `rdma-200g` | 25 GB/s | 5 µs | ConnectX-6 HDR InfiniBand, 200 Gb/s per port |
| `pcie-gen5` | 63 GB/s | 2 µs | PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b |
| `pcie-gen4` | 31.5 GB/s | 2 µs | PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b |
| `eth-100g` | 12.5 GB/s | 20 µs | 100 GbE, 100 Gb/s per port (TCP) |

The latencies are orders of magnitude (a one-sided RDMA read with its setup), not datasheet
numbers: a KV transfer of a few MB is bandwidth-bound on every link above. `custom:GBPS:US` names
a link of GBPS GB/s and US µs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedsim.latency.specs import ModelSpec


@dataclass(frozen=True)
class InterconnectSpec:
    """A link between replicas: bandwidth per direction per GPU, and a fixed latency per transfer."""

    name: str
    bandwidth: float  # bytes per second, each direction
    latency: float  # seconds, once per transfer

    def __post_init__(self) -> None:
        """A positive bandwidth and a latency >= 0, named."""
        if not self.bandwidth > 0 or math.isinf(self.bandwidth):
            raise ValueError(
                f"interconnect {self.name!r}: bandwidth must be > 0 and finite, got {self.bandwidth}"
            )
        if not self.latency >= 0 or math.isinf(self.latency):
            raise ValueError(
                f"interconnect {self.name!r}: latency must be >= 0 and finite, got {self.latency}"
            )


INTERCONNECTS: dict[str, InterconnectSpec] = {
    spec.name: spec
    for spec in (
        InterconnectSpec("nvlink", 450e9, 2e-6),
        InterconnectSpec("ib-400g", 50e9, 5e-6),
        InterconnectSpec("rdma-400g", 50e9, 5e-6),
        InterconnectSpec("ib-200g", 25e9, 5e-6),
        InterconnectSpec("rdma-200g", 25e9, 5e-6),
        InterconnectSpec("pcie-gen5", 63e9, 2e-6),
        InterconnectSpec("pcie-gen4", 31.5e9, 2e-6),
        InterconnectSpec("eth-100g", 12.5e9, 20e-6),
    )
}


def get_interconnect(name: str) -> InterconnectSpec:
    """A named spec, or `custom:GBPS:US` (GB/s per direction, µs per transfer)."""
    if name in INTERCONNECTS:
        return INTERCONNECTS[name]
    if name.startswith("custom:"):
        parts = name.split(":")
        try:
            gbps, us = float(parts[1]), float(parts[2])
            if len(parts) != 3:
                raise ValueError
        except (IndexError, ValueError):
            raise ValueError(f"interconnect {name!r}: write custom:GBPS:US, e.g. custom:25:5") from None
        return InterconnectSpec(name, gbps * 1e9, us * 1e-6)
    raise ValueError(
        f"unknown interconnect {name!r}; choose one of {', '.join(INTERCONNECTS)} or custom:GBPS:US"
    )


def kv_block_bytes_per_gpu(model: ModelSpec, tp: int, block_size: int) -> int:
    """One KV block's bytes on one GPU of a TP group: K and V of every layer, the GPU's KV heads."""
    return block_size * model.kv_bytes_per_token(tp)


def transfer_blocks(tokens: int, block_size: int) -> int:
    """Blocks a transfer of `tokens` moves: vLLM's connectors move whole blocks."""
    return -(-tokens // block_size)
