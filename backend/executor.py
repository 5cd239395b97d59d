"""RealExecutor: runs StepPlans on the real model (the Executor protocol of schedsim.policies).

On CUDA `launch` only enqueues: inputs are packed into persistent pinned buffers on the host, then
(after the step's start event) copied up, placeholders are filled from the previous step's sampled
tensor on the device, the forward and sampling run on the compute stream, and the sampled ids come
back on a copy stream into pinned memory with an event that `collect` waits on. On a CPU the same
steps run in order, either inline or on one worker thread that plays the device (so scheduling
overlaps compute, as with a GPU). Each handle keeps host and device time apart: `host_prepare_s`
(plan to packed inputs), `host_enqueue_s` (issuing the device work) and `device_seconds`. On a CPU,
`device_seconds` is by default the CPU time of the thread that ran the forward (`time.thread_time`),
with one torch intra-op thread: time the process spends descheduled while other processes run does
not count, and no torch worker threads spin against them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from schedsim.policies.plan import StepPlan, StepResult
from schedsim.policies.request import Request

from .config import load_model_config
from .dtypes import canonical_dtype, resolve_dtype
from .input_batch import HostBatch, ModelLimits, RequestState, prepare_batch, register_placeholders
from .input_buffers import InputBuffers, StagedStep, StepInputs
from .kernels import get_ops
from .kv_cache import PagedKVCache
from .model import LlamaModel
from .sampling import SamplingConfig, sample
from .weights import build_model, load_checkpoint

CPU_CLOCKS = ("thread", "wall")


@dataclass
class ExecutorConfig:
    """How the real backend runs: model, device, kernels, KV pool (must match the policy's)."""

    model: str = "tiny"  # a preset name, a config.json, or a checkpoint folder (with safetensors)
    block_size: int = 16
    num_blocks: int = 1024
    device: str = "auto"  # auto | cpu | cuda
    ops: str = "auto"  # auto (Triton on CUDA, torch on CPU) | torch | triton
    dtype: str | None = None  # fp32 | bf16 | fp16 (or float32, ...); default bf16 on CUDA, fp32 on CPU
    seed: int = 0  # random weights
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    cpu_worker_thread: bool = False  # CPU only: run device work on a worker thread
    cpu_threads: int = 1  # CPU only: torch intra-op threads (0 = torch's default; 1 keeps timing clean)
    cpu_clock: str = "thread"  # CPU only: device_seconds from thread CPU time (thread) or the wall clock

    def __post_init__(self) -> None:
        """Reject unknown choices, naming the field."""
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"ExecutorConfig.device must be auto, cpu or cuda, got {self.device!r}")
        if self.ops not in ("auto", "torch", "triton"):
            raise ValueError(f"ExecutorConfig.ops must be auto, torch or triton, got {self.ops!r}")
        if self.dtype is not None:
            try:
                self.dtype = canonical_dtype(self.dtype)
            except ValueError as exc:
                raise ValueError(f"ExecutorConfig.dtype: {exc}") from None
        if self.cpu_clock not in CPU_CLOCKS:
            raise ValueError(f"ExecutorConfig.cpu_clock must be one of {CPU_CLOCKS}, got {self.cpu_clock!r}")
        if self.cpu_threads < 0:
            raise ValueError(f"ExecutorConfig.cpu_threads must be >= 0, got {self.cpu_threads}")
        if self.block_size < 1 or self.num_blocks < 2:
            raise ValueError("ExecutorConfig: block_size must be >= 1 and num_blocks >= 2")


@dataclass(eq=False)
class StepHandle:
    """A launched step: what `collect` waits on. `tokens` is set once the ids are on the host."""

    step_id: int
    req_ids: list[str]
    sample_req_ids: list[str]
    launch_time: float
    batch: HostBatch | None = None
    sampled: torch.Tensor | None = None  # on the device, read by the next step's placeholder fill
    sampled_host: torch.Tensor | None = None
    ready: Any = None  # torch.cuda.Event on CUDA, Future with a worker thread
    timing: tuple[Any, Any] | None = None  # CUDA events around the device work
    tokens: list[int] | None = None
    staged: StagedStep | None = None  # where the packed inputs sit until the device reads them
    host_prepare_s: float = 0.0  # launch() entry to inputs packed (plan walk, placeholders, packing)
    host_enqueue_s: float = 0.0  # issuing the device work (CUDA); 0 on a CPU, where nothing is queued
    # From after the inputs were packed to the sampled ids: CUDA events, or on a CPU the forward's
    # thread CPU time (ExecutorConfig.cpu_clock="thread") or wall time ("wall").
    device_seconds: float = 0.0
    # When the device ran the step, on time.perf_counter()'s clock (CUDA: from events).
    device_start: float = float("nan")
    device_end: float = float("nan")


class RealExecutor:
    """Executes plans on a Llama-style model with a paged KV cache; see the module docstring."""

    def __init__(self, model: LlamaModel, config: ExecutorConfig) -> None:
        self.config = config
        self.model = model
        self.device = model.device
        self.ops = get_ops(config.ops)
        self.cache = PagedKVCache(model.cfg, config.num_blocks, config.block_size, self.device, model.dtype)
        self.states: dict[str, RequestState] = {}
        self.limits = ModelLimits(model.cfg.vocab_size, model.cfg.max_position_embeddings)
        self.buffers = InputBuffers(self.device, pin=self.device.type == "cuda")
        # How placeholders reached the inputs: one slice copy (batch unchanged) or a scatter.
        self.num_fill_slices = 0
        self.num_fill_scatters = 0
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            self.compute_stream = torch.cuda.Stream(self.device)
            self.copy_stream = torch.cuda.Stream(self.device)
            # Anchor event: CUDA event times become perf_counter() times relative to it.
            self._anchor = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            self._anchor.record(self.compute_stream)
            torch.cuda.synchronize(self.device)
            self._anchor_time = time.perf_counter()
        if config.cpu_threads and not self.cuda:
            torch.set_num_threads(config.cpu_threads)
        self._worker = (
            ThreadPoolExecutor(1, thread_name_prefix="schedsim-device")
            if config.cpu_worker_thread and not self.cuda
            else None
        )

    @classmethod
    def from_config(cls, config: ExecutorConfig) -> RealExecutor:
        """Build the model (random weights, or a local checkpoint folder) and the executor."""
        device = torch.device(
            "cuda"
            if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
            else "cpu"
        )
        dtype = resolve_dtype(config.dtype, device)
        if _is_checkpoint(config.model):
            model = load_checkpoint(config.model, device=device, dtype=dtype)
        else:
            model = build_model(load_model_config(config.model), config.seed, device, dtype)
        return cls(model, config)

    def describe(self) -> str:
        """One line saying what runs where (the CLI prints it)."""
        return (
            f"{self.model.cfg.num_params / 1e6:.2f}M-param model on {self.device} "
            f"({self.model.dtype}), ops={self.ops.name}, KV {self.cache.nbytes / 2**20:.1f} MiB"
        )

    def timing_method(self) -> str:
        """How `device_seconds` is measured, in words (validation reports quote it)."""
        if self.cuda:
            return "CUDA events around the step's device work"
        threads = torch.get_num_threads()
        if self.config.cpu_clock == "wall":
            return f"wall clock of the CPU forward ({threads} torch intra-op thread(s))"
        return (
            f"CPU time of the thread running the forward (time.thread_time; {threads} torch "
            "intra-op thread(s)): other processes' load does not count"
        )

    def launch(self, plan: StepPlan, requests: Mapping[str, Request]) -> StepHandle:
        """Prepare inputs on the host and start the step; returns without waiting for the device."""
        for rid in (*plan.finished_req_ids, *plan.preempted_req_ids, *plan.paused_req_ids):
            self.states.pop(rid, None)
        t0 = time.perf_counter()
        batch = prepare_batch(plan, requests, self.states, self.cache, self.limits)
        handle = StepHandle(plan.step_id, batch.req_ids, batch.sample_req_ids, t0, batch)
        if batch.num_tokens == 0:
            handle.tokens = []
            return handle
        register_placeholders(batch, self.states, handle)
        handle.staged = self.buffers.stage(batch)
        t1 = time.perf_counter()
        handle.host_prepare_s = t1 - t0
        if self.cuda:
            self._launch_cuda(handle)
            handle.host_enqueue_s = time.perf_counter() - t1
        elif self._worker is not None:
            handle.ready = self._worker.submit(self._run_cpu, handle)
            self.buffers.hold(handle.staged, handle.ready)
        else:
            self._run_cpu(handle)
        return handle

    def is_ready(self, handle: StepHandle) -> bool:
        """Whether `collect` would return at once (for drivers that poll)."""
        if handle.tokens is not None or handle.ready is None:
            return True
        return handle.ready.done() if isinstance(handle.ready, Future) else bool(handle.ready.query())

    def collect(self, handle: StepHandle) -> StepResult:
        """Wait for the step's sampled ids on the host and hand back the StepResult."""
        if handle.tokens is None:
            if isinstance(handle.ready, Future):
                handle.ready.result()
            elif handle.ready is not None:
                handle.ready.synchronize()
                assert handle.timing is not None  # a CUDA launch records both events
                start, end = handle.timing
                handle.device_seconds = start.elapsed_time(end) / 1e3
                handle.device_start = self._anchor_time + self._anchor.elapsed_time(start) / 1e3
                handle.device_end = handle.device_start + handle.device_seconds
            assert handle.sampled_host is not None  # a launched step copies its ids to the host
            handle.tokens = handle.sampled_host.tolist()
        sampled: dict[str, list[int]] = {rid: [] for rid in handle.req_ids}
        for rid, tok in zip(handle.sample_req_ids, handle.tokens, strict=True):
            sampled[rid] = [int(tok)]
        handle.batch = handle.staged = None  # host inputs no longer needed (and no chain of handles)
        return StepResult(
            step_id=handle.step_id,
            sampled_token_ids=sampled,
            start_time=handle.launch_time,
            end_time=time.perf_counter(),
        )

    def warmup(self, num_tokens: int = 0) -> float:
        """Run a throwaway prefill and decode (compiles the Triton kernels on CUDA); returns seconds.

        The decode splits its short context on purpose, so the split-KV combine kernel compiles here
        too, not in the first timed step with a long context. It writes only blocks the policy has
        not handed out yet, so call it before the first step.
        """
        ops: Any = self.ops  # an attention tuning is not part of Ops: only the Triton ops carry one
        tuning = getattr(ops, "tuning", None)
        if tuning is None:
            return self._warmup_steps(num_tokens)
        ops.tuning = dataclasses.replace(tuning, min_keys_per_split=1)
        try:
            return self._warmup_steps(num_tokens)
        finally:
            ops.tuning = tuning

    def _warmup_steps(self, num_tokens: int) -> float:
        """The throwaway prefill and decode of one request on the first free blocks."""
        n = num_tokens or 2 * self.cache.block_size + 1
        blocks = list(range(1, 1 + -(-(n + 1) // self.cache.block_size)))
        if blocks[-1] >= self.cache.num_blocks:
            raise ValueError(f"warmup needs {len(blocks)} blocks, the cache has {self.cache.num_blocks - 1}")
        vocab = self.model.cfg.vocab_size
        req = Request("__warmup__", 0.0, n, 2, prompt_token_ids=[(7 * i + 3) % vocab for i in range(n)])
        rid = req.request_id
        t0 = time.perf_counter()
        for ctx, num, new in ((0, n, [rid]), (n, 1, [])):
            plan = StepPlan(
                step_id=-1,
                num_scheduled_tokens={rid: num},
                total_num_scheduled_tokens=num,
                context_lens={rid: ctx},
                block_ids={rid: blocks},
                new_req_ids=new,
            )
            self.collect(self.launch(plan, {rid: req}))
        self.states.pop(rid, None)
        return time.perf_counter() - t0

    def close(self) -> None:
        """Stop the CPU worker thread, if any."""
        if self._worker is not None:
            self._worker.shutdown(wait=True)

    # ---- device work -------------------------------------------------------------------------

    def _fill_placeholders(self, inputs: StepInputs, staged: StagedStep) -> None:
        """Copy previous steps' sampled tokens into the rows that feed on them, on the device."""
        for fill in staged.fills:
            sampled = fill.handle.sampled
            if fill.identity:  # the batch is unchanged: one slice copy, as vLLM's common case
                inputs.input_ids[: fill.count].copy_(sampled[: fill.count], non_blocking=True)
                self.num_fill_slices += 1
                continue
            dst = inputs.fill_dst[fill.offset : fill.offset + fill.count]
            src = inputs.fill_src[fill.offset : fill.offset + fill.count]
            inputs.input_ids.scatter_(0, dst, sampled.index_select(0, src))
            self.num_fill_scatters += 1

    @torch.inference_mode()
    def _forward_and_sample(self, handle: StepHandle) -> torch.Tensor:
        """Upload, fill placeholders, run the model and sample: every op on the current stream."""
        batch, staged = handle.batch, handle.staged
        assert batch is not None and staged is not None  # launch() sets both; only collect() clears them
        self.cache.copy_blocks(batch.block_copies)  # partial-block reuse, before anything reads them
        inputs = self.buffers.upload(staged)
        if self.cuda:  # the host slot may be rewritten once these transfers are done
            copied = torch.cuda.Event()
            copied.record()
            self.buffers.hold(staged, copied)
        self._fill_placeholders(inputs, staged)
        hidden = self.model(inputs.input_ids, inputs.positions, self.cache.layers, inputs.meta, self.ops)
        logits = self.model.compute_logits(hidden.index_select(0, inputs.sample_rows))
        return sample(logits, batch.sample_req_ids, batch.sample_positions, self.config.sampling)

    def _run_cpu(self, handle: StepHandle) -> None:
        """The whole step on the CPU (inline or on the worker thread)."""
        handle.device_start = time.perf_counter()
        cpu0 = time.thread_time()
        handle.sampled = self._forward_and_sample(handle)
        handle.sampled_host = handle.sampled
        cpu = time.thread_time() - cpu0
        handle.device_end = time.perf_counter()
        wall = handle.device_end - handle.device_start
        handle.device_seconds = cpu if self.config.cpu_clock == "thread" and cpu > 0 else wall

    def _launch_cuda(self, handle: StepHandle) -> None:
        """Enqueue the step on the compute stream and the D2H copy on the copy stream."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.compute_stream):
            start.record()
            sampled = self._forward_and_sample(handle)
            end.record()
        handle.sampled, handle.timing = sampled, (start, end)
        handle.sampled_host = torch.empty(sampled.shape, dtype=sampled.dtype, pin_memory=True)
        handle.ready = torch.cuda.Event(blocking=True)
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_stream(self.compute_stream)
            sampled.record_stream(self.copy_stream)  # not reused before the copy has read it
            handle.sampled_host.copy_(sampled, non_blocking=True)
            handle.ready.record()


def _is_checkpoint(model: str) -> bool:
    """A folder holding config.json and safetensors weights."""
    from pathlib import Path

    path = Path(model)
    return path.is_dir() and (path / "config.json").exists()
