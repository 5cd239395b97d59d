"""`run_real`: replay a workload through a policy on the real backend, into a simulator-shaped RunResult."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
from schedsim.engine.loop import Engine
from schedsim.latency.fitted import steps_frame
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.policies import Policy, make_policy
from schedsim.run.config import RunConfig
from schedsim.run.real_workload import real_workload
from schedsim.run.resolve import policy_options
from schedsim.run.result import RunResult
from schedsim.run.simulate import build_result, engine_depth
from schedsim.run.workload import PreparedWorkload, prepare
from schedsim.worlds.inputs import InputStream
from schedsim.worlds.realtime import RealTimeWorld, real_requests
from tqdm import tqdm


@dataclasses.dataclass
class RealResolved:
    """The resolved run as config.json records it, describing the real backend."""

    config: RunConfig
    backend: str
    policy_options: dict[str, Any]
    num_gpu_blocks: int
    max_model_len: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the config plus what actually ran."""
        out = self.config.to_dict()
        out.update(
            backend="real",
            backend_description=self.backend,
            num_gpu_blocks=self.num_gpu_blocks,
            max_model_len=self.max_model_len,
            resolved_policy_options=dict(self.policy_options),
        )
        return out


def _start_at_zero(prep: PreparedWorkload) -> None:
    """Shift arrivals (and aborts) so the first arrives at 0: a real run cannot skip idle time."""
    if not prep.requests:
        return
    offset = min(r.arrival_time for r in prep.requests)
    if offset:
        prep.requests = [dataclasses.replace(r, arrival_time=r.arrival_time - offset) for r in prep.requests]
        prep.columns.arrival = prep.columns.arrival - offset
        prep.aborts = [(t - offset, rid) for t, rid in prep.aborts]


def make_executor(cfg: RunConfig, backend: dict[str, Any] | None = None) -> Any:
    """The RealExecutor for a run: ExecutorConfig options, with the run's block size and KV pool."""
    from schedsim.backend import ExecutorConfig, RealExecutor  # torch: imported only for real runs

    opts = dict(backend or {})
    if opts.setdefault("block_size", cfg.block_size) != cfg.block_size:
        raise ValueError(f"backend block_size {opts['block_size']} != RunConfig.block_size {cfg.block_size}")
    opts["num_blocks"] = cfg.num_gpu_blocks or opts.get("num_blocks", 1024)
    return RealExecutor.from_config(ExecutorConfig(**opts))


@dataclasses.dataclass
class RealRun:
    """The pieces of one real-time run, as `build_result` reads them."""

    policy: Policy
    engine: Engine
    world: RealTimeWorld
    metrics: MetricsRecorder
    depth: int


def progress_bar(total: int, enabled: bool, desc: str = "real backend", unit: str = "req") -> Any:
    """A progress bar on stderr, shown only when asked and stderr is a terminal."""
    return tqdm(
        total=total,
        unit=unit,
        desc=desc,
        mininterval=0.5,
        file=sys.stderr,
        disable=not (enabled and sys.stderr.isatty()),
    )


def run_real(
    config: RunConfig | None = None,
    workload: pd.DataFrame | None = None,
    backend: dict[str, Any] | None = None,
    warmup: bool = True,
    executor: Any = None,
    full_trace: bool = False,
    progress: bool = False,
    announce: Callable[[str], None] | None = None,
) -> RunResult:
    """Run one workload on the real backend; `backend` holds ExecutorConfig options (model, ops, ...)
    unless a ready `executor` is given. Without `max_requests` or `full_trace` only the first
    DEFAULT_REAL_REQUESTS requests run (`real_workload`); `announce` receives the line that says so.
    result.extra["real_steps"] is the measured steps table (`schedsim.latency.fitted.steps_frame`,
    device time as the executor measures it), ready for `fit_step_model`."""
    cfg = config or RunConfig()
    if cfg.num_spec_tokens:
        raise ValueError(
            "RunConfig.num_spec_tokens: the real backend has no drafter (speculative "
            "decoding runs in simulation only)"
        )
    wall0 = time.perf_counter()
    own = executor is None
    executor = executor or make_executor(cfg, backend)
    num_blocks = executor.cache.num_blocks
    model_len = executor.model.cfg.max_position_embeddings
    max_model_len = min(cfg.max_model_len or model_len, model_len)
    options = policy_options(cfg, num_blocks, max_model_len)
    chosen = real_workload(cfg, workload, max_model_len, full_trace)
    if announce is not None:
        announce(chosen.description)
    prep = prepare(chosen.frame, cfg, max_model_len)
    if prep.kv_load_failures:
        raise ValueError(
            "RunConfig.kv_load_failures / kv_load_failure_fraction: KV-load faults are "
            "injected in simulation only; the real backend has no remote KV to fail"
        )
    _start_at_zero(prep)
    prep.requests = real_requests(
        prep.requests, prep.targets, cfg.block_size, executor.model.cfg.vocab_size, cfg.seed
    )
    policy = make_policy(cfg.policy, **options)
    depth = engine_depth(cfg, policy)
    engine = Engine(policy, batch_queue_depth=depth)
    warm = executor.warmup() if warmup else 0.0
    arrivals = [r for r in prep.requests if r.request_id not in prep.rejected]
    world = RealTimeWorld(engine, executor, InputStream(arrivals, prep.aborts), until=cfg.max_sim_time)
    metrics = MetricsRecorder(policy, prep.requests, world.clock, record_itl=cfg.record_itl)
    engine.observer = world.metrics = metrics
    bar = progress_bar(len(prep.requests), progress)
    world.on_progress = lambda: bar.update(metrics.num_done - bar.n)
    try:
        world.run()
    finally:
        bar.close()
        if own:
            executor.close()
    resolved = RealResolved(cfg, executor.describe(), options, num_blocks, max_model_len)
    run = RealRun(policy, engine, world, metrics, depth)
    result = build_result(cfg, resolved.describe(), prep, run, time.perf_counter() - wall0)
    result.summary.update(
        backend="real",
        backend_description=executor.describe(),
        warmup_s=warm,
        workload=chosen.description,
        step_timing=executor.timing_method(),
    )
    done = world.steps
    result.extra["real_steps"] = steps_frame([s.shape for s in done], [s.device_s for s in done])
    result.extra["step_shapes"] = [s.shape for s in done]
    result.extra["prepared"] = prep
    return result
