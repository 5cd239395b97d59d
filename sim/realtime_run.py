"""`run_real`: replay a workload through a policy on the real backend, into a simulator-shaped RunResult."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pandas as pd

from .config import RunConfig
from .engine import Engine
from .metrics import MetricsRecorder
from .policies import make_policy
from .realtime import RealTimeWorld, real_requests
from .results import RunResult
from .setup import _policy_options
from .simulate import _engine_depth, _result
from .workload import PreparedWorkload, load, prepare
from .world import InputStream


@dataclasses.dataclass
class RealResolved:
    """The resolved run as `simulate._result` reads it, describing the real backend."""

    config: RunConfig
    backend: str
    policy_options: dict[str, Any]
    num_gpu_blocks: int
    max_model_len: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the config plus what actually ran."""
        out = self.config.to_dict()
        out.update(backend="real", backend_description=self.backend, num_gpu_blocks=self.num_gpu_blocks,
                   max_model_len=self.max_model_len, resolved_policy_options=dict(self.policy_options))
        return out


def _workload(cfg: RunConfig, workload: pd.DataFrame | None) -> pd.DataFrame:
    """The configured trace, or the given table with max_requests and rate applied."""
    if workload is None:
        return load(cfg)
    if cfg.max_requests is not None:
        workload = workload.iloc[: cfg.max_requests]
    if cfg.rate is not None:
        from .traces import scale_rate

        workload = scale_rate(workload, cfg.rate)
    return workload


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
    from .backend import ExecutorConfig, RealExecutor  # torch: imported only for real runs

    opts = dict(backend or {})
    if opts.setdefault("block_size", cfg.block_size) != cfg.block_size:
        raise ValueError(f"backend block_size {opts['block_size']} != RunConfig.block_size {cfg.block_size}")
    opts["num_blocks"] = cfg.num_gpu_blocks or opts.get("num_blocks", 1024)
    return RealExecutor.from_config(ExecutorConfig(**opts))


def run_real(config: RunConfig | None = None, workload: pd.DataFrame | None = None,
             backend: dict[str, Any] | None = None, warmup: bool = True, executor: Any = None) -> RunResult:
    """Run one workload on the real backend; `backend` holds ExecutorConfig options (model, ops, ...)
    unless a ready `executor` is given. result.extra["real_steps"] is the measured steps table
    (`schedsim.latency.fitted.steps_frame`), ready for `fit_step_model`."""
    from .latency.fitted import steps_frame

    cfg = config or RunConfig()
    if cfg.num_spec_tokens:
        raise ValueError("RunConfig.num_spec_tokens: the real backend has no drafter (speculative "
                         "decoding runs in simulation only)")
    wall0 = time.perf_counter()
    own = executor is None
    executor = executor or make_executor(cfg, backend)
    num_blocks = executor.cache.num_blocks
    model_len = executor.model.cfg.max_position_embeddings
    max_model_len = min(cfg.max_model_len or model_len, model_len)
    policy_options = _policy_options(cfg, num_blocks, max_model_len)
    prep = prepare(_workload(cfg, workload), cfg, max_model_len)
    if prep.kv_load_failures:
        raise ValueError("RunConfig.kv_load_failures / kv_load_failure_fraction: KV-load faults are "
                         "injected in simulation only; the real backend has no remote KV to fail")
    _start_at_zero(prep)
    prep.requests = real_requests(prep.requests, prep.targets, cfg.block_size,
                                  executor.model.cfg.vocab_size, cfg.seed)
    policy = make_policy(cfg.policy, **policy_options)
    depth = _engine_depth(cfg, policy)
    engine = Engine(policy, batch_queue_depth=depth)
    warm = executor.warmup() if warmup else 0.0
    arrivals = [r for r in prep.requests if r.request_id not in prep.rejected]
    world = RealTimeWorld(engine, executor, InputStream(arrivals, prep.aborts), until=cfg.max_sim_time)
    metrics = MetricsRecorder(policy, prep.requests, world.clock, record_itl=cfg.record_itl)
    engine.observer = world.metrics = metrics
    try:
        world.run()
    finally:
        if own:
            executor.close()
    resolved = RealResolved(cfg, executor.describe(), policy_options, num_blocks, max_model_len)
    result = _result(cfg, resolved, prep, metrics, depth, time.perf_counter() - wall0)
    result.summary.update(backend="real", backend_description=executor.describe(), warmup_s=warm)
    done = world.steps
    result.extra["real_steps"] = steps_frame([s.shape for s in done], [s.gpu_time for s in done])
    result.extra["step_shapes"] = [s.shape for s in done]
    result.extra["prepared"] = prep
    return result


def add_backend_arguments(parser: Any, with_switch: bool = True) -> None:
    """`--backend real` and the real backend's options, for `schedsim run` / `compare` / `validate`."""
    g = parser.add_argument_group("real backend")
    if with_switch:
        g.add_argument("--backend", choices=("sim", "real"), default="sim",
                       help="sim: simulated time (default); real: run the policy on the real model")
    g.add_argument("--real-model", default="tiny",
                   help="backend model: a preset (tiny, mini, small, llama-1b), a config.json or a "
                        "checkpoint folder with safetensors")
    g.add_argument("--real-ops", choices=("auto", "torch", "triton"), default="auto",
                   help="kernels: auto = Triton on CUDA, torch references on a CPU")
    g.add_argument("--real-device", choices=("auto", "cpu", "cuda"), default="auto")
    g.add_argument("--real-dtype", choices=("fp32", "bf16", "fp16"), default=None,
                   help="model and KV-cache dtype (default: bf16 on CUDA, fp32 on a CPU)")
    g.add_argument("--real-worker-thread", action="store_true",
                   help="CPU: run the model on a worker thread so scheduling overlaps it")
    g.add_argument("--real-seed", type=int, default=0, help="seed of the random weights")


def backend_options(args: Any) -> dict[str, Any]:
    """ExecutorConfig options from the parsed `add_backend_arguments` flags."""
    return {"model": args.real_model, "ops": args.real_ops, "device": args.real_device,
            "dtype": args.real_dtype, "cpu_worker_thread": args.real_worker_thread, "seed": args.real_seed}
