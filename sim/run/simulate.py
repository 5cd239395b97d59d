"""`schedsim.simulate`: replay a workload through a policy in simulated time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from schedsim import accel
from schedsim.engine.loop import Engine
from schedsim.fastforward.stretch import FastForward
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.metrics.summary import Slo, summarize
from schedsim.metrics.tables import itl_table, requests_table, steps_table, timeline_table
from schedsim.policies import HasRunCounters, Policy, Request, SupportsFastForward, make_policy
from schedsim.run.cluster import is_cluster, simulate_cluster
from schedsim.run.config import RunConfig
from schedsim.run.features import check_structured_fraction, warn_unmodelled
from schedsim.run.memory import frozen_setup, pin_mmap_threshold, release_unused
from schedsim.run.resolve import make_draft_latency, resolve_run
from schedsim.run.result import RunResult
from schedsim.run.workload import PreparedWorkload, load, prepare, select
from schedsim.worlds.arrivals import Arrivals
from schedsim.worlds.executor import SimExecutor
from schedsim.worlds.inbox import Inbox
from schedsim.worlds.inputs import InputStream
from schedsim.worlds.oracle import WorkloadOracle, request_keys
from schedsim.worlds.simpy_world import SimWorld
from tqdm import tqdm


def simulate(
    config: RunConfig | None = None,
    workload: pd.DataFrame | None = None,
    progress: bool = False,
    check_invariants: bool = False,
) -> RunResult:
    """Run one simulation; `workload` overrides config.trace (max_requests and rate still apply)."""
    cfg = config or RunConfig()
    wall0 = time.perf_counter()
    pin_mmap_threshold()  # long runs: columns grow in place, no heap fragmentation
    resolved = resolve_run(cfg)
    df = load(cfg) if workload is None else select(workload, cfg)
    prep = prepare(df, cfg, resolved.max_model_len)
    if is_cluster(cfg):
        return simulate_cluster(cfg, df, prep, build_sim_run, build_result, check_invariants=check_invariants)
    del df
    release_unused()  # the run keeps only the prepared columns
    run = build_sim_run(
        cfg,
        resolved.policy_options,
        resolved.latency_model,
        resolved.cpu_model,
        prep,
        check_invariants=check_invariants,
    )
    bar = tqdm(total=len(prep), unit="req", desc="simulate", mininterval=0.5) if progress else None
    if bar is not None:
        run.world.on_progress = _bar_updater(bar, run.metrics)
    try:
        with frozen_setup():
            run.world.run()
    finally:
        if bar is not None:
            bar.update(run.metrics.num_done - bar.n)
            bar.close()
    return build_result(cfg, resolved.describe(), prep, run, time.perf_counter() - wall0)


@dataclass
class SimRun:
    """The pieces of one simulated run, wired together."""

    policy: Policy
    engine: Engine
    world: SimWorld
    metrics: MetricsRecorder
    depth: int
    fast_forward: FastForward | None  # the world's jump hook (None: step by step)


def engine_depth(cfg: RunConfig, policy: Policy) -> int:
    """Batches in flight: the policy's own choice unless the config forces a mode."""
    if cfg.engine == "sync":
        return 1
    depth = cfg.batch_queue_depth or max(2, policy.max_concurrent_batches)
    if cfg.engine == "async":
        return depth
    return policy.max_concurrent_batches if cfg.batch_queue_depth is None else depth


def build_sim_run(
    cfg: RunConfig,
    policy_options: dict[str, Any],
    latency_model: Any,
    cpu_model: Any,
    prep: PreparedWorkload,
    requests: Sequence[Request] | None = None,
    check_invariants: bool = False,
    inbox: Inbox | None = None,
) -> SimRun:
    """Policy, oracle, engine, executor, world and recorder for a prepared workload.

    Requests are built when they arrive (a million-request replay never holds them all), unless
    ready-made `requests` (one per workload row) are given. With an `inbox` (a cluster's replica)
    the engine's inputs are what a router sends it, in the inbox's environment.
    """
    policy = make_policy(cfg.policy, **policy_options)
    check_structured_fraction(cfg, policy)
    warn_unmodelled(cfg, policy, prep.structured, prep.lora)
    oracle = WorkloadOracle(
        cfg.seed, acceptance_rate=cfg.spec_acceptance_rate, kv_load_failures=prep.kv_load_failures
    )
    depth = engine_depth(cfg, policy)
    jump = None
    if cfg.fast_forward and isinstance(policy, SupportsFastForward):
        jump = FastForward(policy.fast_forward(), cpu_model)
    engine = Engine(
        policy, batch_queue_depth=depth, check_invariants=check_invariants, fast_forward=jump is not None
    )
    rows = prep.arrival_rows()
    executor = SimExecutor(
        oracle,
        latency_model,
        propose_drafts=depth == 1,
        draft_latency_model=make_draft_latency(cfg),
        num_spec_tokens=cfg.num_spec_tokens,
    )
    if inbox is not None:  # the router admits each request it sends here
        world = SimWorld(engine, executor, cpu_model, inbox, until=cfg.max_sim_time, jump=jump, env=inbox.env)
        metrics = MetricsRecorder(policy, prep.columns, world.clock, record_itl=cfg.record_itl)
    else:
        longest = int(prep.columns.prompt[rows].max()) if len(rows) else 0
        arrivals = prep.columns.arrival[rows]
        inputs = InputStream(arrivals, prep.aborts, make=prep.request, longest_prompt=longest)
        world = SimWorld(engine, executor, cpu_model, inputs, until=cfg.max_sim_time, jump=jump)
        metrics = MetricsRecorder(policy, prep.columns, world.clock, record_itl=cfg.record_itl)
        keys = request_keys(oracle.seed, prep.columns.ids)
        ready = None if requests is None else list(requests)
        assert ready is None or [r.request_id for r in ready] == prep.columns.ids, "one Request per row"
        inputs.make = Arrivals(rows, prep.row_requests, ready, prep.targets, keys, oracle, metrics)
    engine.observer = world.metrics = metrics
    return SimRun(policy, engine, world, metrics, depth, jump)


def _bar_updater(bar: Any, metrics: MetricsRecorder) -> Callable[[int], None]:
    """Advance the bar to the number of finished requests every 256 launches."""

    def update(step: int) -> None:
        if step & 255 == 0:
            bar.update(metrics.num_done - bar.n)

    return update


def build_result(
    cfg: RunConfig, described: dict[str, Any], prep: PreparedWorkload, run: Any, wall: float
) -> RunResult:
    """The RunResult of a finished run (`run`: a SimRun, or any object with the same policy,
    metrics and depth): tables, summary, resolved config."""
    m: MetricsRecorder = run.metrics
    requests = requests_table(m, prep.targets, prep.rejected)
    steps, timeline = steps_table(m), timeline_table(m)
    itl = itl_table(m) if cfg.record_itl else None
    slo = Slo(cfg.slo_ttft_ms, cfg.slo_tpot_ms, cfg.slo_e2el_ms)
    summary = summarize(requests, steps, timeline, m.itl_gaps.arrays(), slo, wall)
    summary["engine"] = "sync" if run.depth == 1 else f"batch_queue(depth={run.depth})"
    summary["num_prefix_skips"] = 0
    summary["num_rejected_kv"] = len(m.rejections)  # of num_rejected: refused by the policy on arrival
    if isinstance(run.policy, HasRunCounters):
        summary.update(run.policy.run_counters())
    if isinstance(run, SimRun):
        ff = run.fast_forward
        summary["fast_forward_jumps"] = ff.num_jumps if ff is not None else 0
        summary["fast_forward_steps"] = ff.num_jumped_steps if ff is not None else 0
    described["engine_resolved"] = summary["engine"]
    core = accel.status()  # which build ran (speed only: both give the same tables)
    described["compiled_core"] = {"active": core.active, "reason": core.reason}
    return RunResult(requests, steps, timeline, summary, described, itl)
