"""Persistent input buffers: a step's host batch is packed into pinned host memory reused across
steps (two flat arrays, int64 and int32), then copied to the device in two transfers.

Packing happens in `stage`, on the host, before the step's start event is recorded, so the device
time of a step never includes building its inputs. Host slots rotate; a slot is rewritten only once
the transfer (CUDA) or the step (CPU worker thread) that read it is done. Every segment starts on a
16-element boundary, so kernel pointer arguments keep the same alignment (and the same compiled
variant) whatever the batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .input_batch import HostBatch
from .kernels import AttentionMetadata

ALIGN = 16  # elements: segment starts stay 16-byte aligned for int32 and int64 alike
INT64_FIELDS = ("input_ids", "positions", "slot_mapping", "sample_rows", "fill_dst", "fill_src")
INT32_FIELDS = ("query_start_loc", "seq_lens", "block_tables")


def _aligned(n: int) -> int:
    """n rounded up to a multiple of ALIGN."""
    return -(-n // ALIGN) * ALIGN


@dataclass
class FillSource:
    """Placeholder rows fed by one earlier step: its handle and its segment of fill_dst/fill_src."""

    handle: Any
    offset: int
    count: int
    identity: bool  # rows 0..count-1 take rows 0..count-1 of the source: a slice copy suffices


@dataclass
class StagedStep:
    """Where one step's inputs sit in a host slot, with the host-side figures the kernels need."""

    slot: int
    offsets: dict[str, tuple[int, int]]  # field -> (start, length) in its flat array
    lengths: dict[str, int]  # used length of the flat "i64" and "i32" arrays
    num_seqs: int
    width: int  # block-table columns of this step
    max_query_len: int
    max_seq_len: int
    num_decodes: int
    fills: list[FillSource] = field(default_factory=list)


@dataclass
class StepInputs:
    """One step's inputs where the model runs (views into the persistent buffers)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: torch.Tensor
    fill_dst: torch.Tensor
    fill_src: torch.Tensor


def _layout(fields: tuple[str, ...], sizes: dict[str, int]) -> tuple[dict[str, tuple[int, int]], int]:
    """Aligned (start, length) of each field, and the total length."""
    out, pos = {}, 0
    for name in fields:
        out[name] = (pos, sizes[name])
        pos += _aligned(sizes[name])
    return out, pos


def _group_fills(batch: HostBatch) -> tuple[list[int], list[int], list[FillSource]]:
    """Placeholder rows grouped by the step that samples them: destination rows, source rows, groups."""
    by_source: dict[int, tuple[Any, list[int], list[int]]] = {}
    for row, pending in batch.fills:
        entry = by_source.setdefault(id(pending.handle), (pending.handle, [], []))
        entry[1].append(row)
        entry[2].append(pending.row)
    dst: list[int] = []
    src: list[int] = []
    groups = []
    for handle, rows, source_rows in by_source.values():
        identity = rows == source_rows == list(range(len(rows)))
        groups.append(FillSource(handle, len(dst), len(rows), identity))
        dst += rows
        src += source_rows
    return dst, src, groups


class InputBuffers:
    """Host staging slots (pinned on CUDA) and device buffers, grown on demand, never per step."""

    def __init__(self, device: torch.device, pin: bool, slots: int = 3) -> None:
        if slots < 2:
            raise ValueError(f"InputBuffers.slots must be >= 2 (one staging while one is read), got {slots}")
        self.device = device
        self.pin = pin
        self.copy_to_device = device.type != "cpu"
        self.host: list[dict[str, torch.Tensor]] = [{} for _ in range(slots)]
        self.busy: list[Any] = [None] * slots  # event or future of the last reader of each slot
        self.dev: dict[str, torch.Tensor] = {}
        self.next_slot = 0
        self.num_allocations = 0  # buffer (re)allocations so far: stays flat once sizes are reached

    def stage(self, batch: HostBatch) -> StagedStep:
        """Pack the batch into the next free host slot (host work only)."""
        dst, src, groups = _group_fills(batch)
        width = max(len(t) for t in batch.block_tables)
        sizes = {
            "input_ids": batch.num_tokens,
            "positions": batch.num_tokens,
            "slot_mapping": batch.num_tokens,
            "sample_rows": len(batch.sample_rows),
            "fill_dst": len(dst),
            "fill_src": len(src),
            "query_start_loc": len(batch.query_start_loc),
            "seq_lens": len(batch.seq_lens),
            "block_tables": len(batch.block_tables) * width,
        }
        off64, len64 = _layout(INT64_FIELDS, sizes)
        off32, len32 = _layout(INT32_FIELDS, sizes)
        slot = self._take_slot(len64, len32)
        i64, i32 = self.host[slot]["i64"].numpy(), self.host[slot]["i32"].numpy()
        for name, values in (
            ("input_ids", batch.input_ids),
            ("positions", batch.positions),
            ("slot_mapping", batch.slot_mapping),
            ("sample_rows", batch.sample_rows),
            ("fill_dst", dst),
            ("fill_src", src),
        ):
            start, n = off64[name]
            i64[start : start + n] = values
        for name, values in (("query_start_loc", batch.query_start_loc), ("seq_lens", batch.seq_lens)):
            start, n = off32[name]
            i32[start : start + n] = values
        start, n = off32["block_tables"]
        tables = i32[start : start + n].reshape(len(batch.block_tables), width)
        for i, table in enumerate(batch.block_tables):
            tables[i, : len(table)] = table
            tables[i, len(table) :] = 0
        qsl = batch.query_start_loc
        lens = [b - a for a, b in zip(qsl[:-1], qsl[1:], strict=True)]
        return StagedStep(
            slot,
            off64 | off32,
            {"i64": len64, "i32": len32},
            len(batch.seq_lens),
            width,
            max(lens),
            max(batch.seq_lens),
            sum(n == 1 for n in lens),
            groups,
        )

    def upload(self, staged: StagedStep) -> StepInputs:
        """The step's inputs where the model runs: two async copies on the current CUDA stream, or
        views of the host slot on a CPU."""
        host = self.host[staged.slot]
        if self.copy_to_device:
            for kind, need in staged.lengths.items():
                if kind not in self.dev or self.dev[kind].numel() < need:
                    size, dtype = host[kind].numel(), host[kind].dtype
                    self.dev[kind] = torch.empty(size, dtype=dtype, device=self.device)
                    self.num_allocations += 1
                self.dev[kind][:need].copy_(host[kind][:need], non_blocking=True)
            flat = self.dev
        else:
            flat = host

        def view(name: str) -> torch.Tensor:
            start, n = staged.offsets[name]
            return flat["i64" if name in INT64_FIELDS else "i32"][start : start + n]

        tables = view("block_tables").view(staged.num_seqs, staged.width)
        meta = AttentionMetadata(
            view("query_start_loc"),
            view("seq_lens"),
            tables,
            view("slot_mapping"),
            staged.max_query_len,
            staged.max_seq_len,
            staged.num_decodes,
        )
        return StepInputs(
            view("input_ids"),
            view("positions"),
            meta,
            view("sample_rows"),
            view("fill_dst"),
            view("fill_src"),
        )

    def hold(self, staged: StagedStep, reader: Any) -> None:
        """Mark the slot busy until `reader` (a CUDA event or a Future) is done."""
        self.busy[staged.slot] = reader

    def _take_slot(self, len64: int, len32: int) -> int:
        """The next slot, once its last reader is done, with room for this step."""
        slot = self.next_slot
        self.next_slot = (slot + 1) % len(self.host)
        reader = self.busy[slot]
        if hasattr(reader, "result"):  # a Future: the CPU worker thread's step
            reader.result()
        elif reader is not None:  # a CUDA event recorded after the transfers
            reader.synchronize()
        self.busy[slot] = None
        bufs = self.host[slot]
        for kind, need, dtype in (("i64", len64, torch.int64), ("i32", len32, torch.int32)):
            if kind not in bufs or bufs[kind].numel() < need:
                size = max(_aligned(need) * 2, 256)
                bufs[kind] = torch.zeros(size, dtype=dtype, pin_memory=self.pin)
                self.num_allocations += 1
        return slot
