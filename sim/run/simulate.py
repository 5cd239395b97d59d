"""`schedsim.run.simulate`: replay a workload through a policy in simulated time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from schedsim import accel
from schedsim.run.config import RunConfig
from schedsim.engine.loop import Engine
from schedsim.worlds.executor import SimExecutor
from schedsim.run.memory import pin_mmap_threshold, release_unused
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.metrics.summary import summarize
from schedsim.metrics.tables import itl_table, requests_table, steps_table, timeline_table
from schedsim.worlds.oracle import WorkloadOracle
from schedsim.policies import Request, make_policy
from schedsim.run.result import RunResult
from schedsim.run.segments import Merged, SplitRun, plan_split, prefix_skips, run_counters
from schedsim.run.segments_fork import HelperFailed, run_split
from schedsim.run.segments_merge import Tables
from schedsim.run.resolve import resolve_run
from schedsim.run.workload import PreparedWorkload, load, prepare
from schedsim.worlds.simpy_world import InputStream, SimWorld


def _engine_depth(cfg: RunConfig, policy: Any) -> int:
    """Batches in flight: the policy's own choice unless the config forces a mode."""
    if cfg.engine == "sync":
        return 1
    depth = cfg.batch_queue_depth or max(2, policy.max_concurrent_batches)
    if cfg.engine == "async":
        return depth
    return policy.max_concurrent_batches if cfg.batch_queue_depth is None else depth


def _progress_bar(total: int, enabled: bool) -> Any:
    """A tqdm bar over finished requests (None when disabled)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc="simulate", mininterval=0.5)


def simulate(config: RunConfig | None = None, workload: pd.DataFrame | None = None,
             progress: bool = False, check_invariants: bool = False) -> RunResult:
    """Run one simulation; `workload` overrides config.trace (max_requests and rate still apply)."""
    cfg = config or RunConfig()
    wall0 = time.perf_counter()
    pin_mmap_threshold()  # long runs: columns grow in place, no heap fragmentation
    resolved = resolve_run(cfg)
    if workload is None:
        workload = load(cfg)
    else:
        if cfg.max_requests is not None:
            workload = workload.iloc[: cfg.max_requests]
        if cfg.rate is not None:
            from schedsim.traces import scale_rate

            workload = scale_rate(workload, cfg.rate)
    prep = prepare(workload, cfg, resolved.max_model_len)
    del workload  # the run keeps only the prepared columns
    release_unused()
    build = _Builder(cfg, resolved, prep, check_invariants)
    run, merged, reason = _replay(build, cfg, prep, progress)
    tables = merged.tables if merged is not None else build.tables(run)
    result = _assemble(cfg, resolved, tables, run.metrics, run.depth, time.perf_counter() - wall0)
    counters = merged.counters if merged is not None else run_counters(run.world)
    s = result.summary  # fast-forward diagnostics; prefix skips added up across a split
    s["fast_forward_jumps"], s["fast_forward_steps"], s["num_prefix_skips"] = counters
    result.config["parallel_resolved"] = merged.describe() if merged is not None else reason
    return result


class _Builder:
    """Builds a run's policy, engine, world and recorder; `start` > 0 replays from that input."""

    def __init__(self, cfg: RunConfig, resolved: Any, prep: PreparedWorkload,
                 check_invariants: bool) -> None:
        self.cfg, self.resolved, self.prep, self.check_invariants = cfg, resolved, prep, check_invariants
        self.rows = prep.arrival_rows()

    def __call__(self, start: int) -> SplitRun:
        """A fresh run whose input stream starts at position `start`."""
        cfg, prep, resolved = self.cfg, self.prep, self.resolved
        policy = make_policy(cfg.policy, **resolved.policy_options)
        oracle = WorkloadOracle(cfg.seed, acceptance_rate=cfg.spec_acceptance_rate,
                                kv_load_failures=prep.kv_load_failures)
        depth = _engine_depth(cfg, policy)
        engine = Engine(policy, batch_queue_depth=depth, check_invariants=self.check_invariants,
                        fast_forward=cfg.fast_forward)
        rows = self.rows
        inputs = InputStream(prep.columns.arrival[rows], prep.aborts, make=prep.request)
        executor = SimExecutor(oracle, resolved.latency_model, propose_drafts=depth == 1)
        world = SimWorld(engine, executor, resolved.cpu_model, inputs, until=cfg.max_sim_time)
        inputs.pos = start
        metrics = MetricsRecorder(policy, prep.columns, world.clock, record_itl=cfg.record_itl)
        inputs.make = _arrival_factory(prep, rows, oracle, metrics)  # Requests built when they arrive
        engine.observer = world.metrics = metrics
        return SplitRun(engine, world, metrics, depth)

    def tables(self, run: SplitRun) -> Tables:
        """The run's tables and ITL samples."""
        return build_tables(self.cfg, self.prep, run.metrics)


def build_tables(cfg: RunConfig, prep: Any, m: MetricsRecorder) -> Tables:
    """The recorder's tables (RunResult's) and its ITL samples."""
    requests = requests_table(m, prep.targets, prep.rejected)
    steps, timeline = steps_table(m), timeline_table(m)
    itl = itl_table(m) if cfg.record_itl else None
    return Tables(requests, steps, timeline, itl, m.itl_gaps.arrays())


def _replay(build: _Builder, cfg: RunConfig, prep: PreparedWorkload, progress: bool
            ) -> tuple[SplitRun, Merged | None, str]:
    """Run the workload, in two processes where a split is possible (schedsim.run.segments)."""
    run = build(0)
    split, reason = plan_split(cfg, prep, build.rows, run)
    bar = _progress_bar(len(prep), progress)  # follows this process; the helper's part at the end
    if bar is not None:
        run.world.on_progress = _bar_updater(bar, run.metrics)
    merged = None
    try:
        if split is None:
            run.world.run()
            return run, None, reason
        try:
            merged = run_split(run, split, build, build.tables)
            return run, merged, "serial: no idle point shared with the helper"
        except HelperFailed as exc:  # the helper's error, if real, comes back from the serial run
            run = build(0)
            run.world.run()
            return run, None, f"serial: {exc}"
    finally:
        if bar is not None:
            done = run.metrics.num_done if merged is None else int(
                merged.tables.requests["finish_reason"].notna().sum())
            bar.update(done - bar.n)
            bar.close()


def _arrival_factory(prep: PreparedWorkload, rows: Any, oracle: WorkloadOracle,
                     metrics: MetricsRecorder) -> Callable[[int], Request]:
    """Build the k-th arrival's Request when it is due, and register it with oracle and metrics."""
    targets = prep.targets

    def make(k: int) -> Request:
        i = int(rows[k])
        req = prep.request(i)
        oracle.add(req.request_id, int(targets[i]))
        metrics.admit(i, req)
        return req
    return make


def _bar_updater(bar: Any, metrics: MetricsRecorder) -> Any:
    """Advance the bar to the number of finished requests every 256 launches."""
    def update(step: int) -> None:
        if step & 255 == 0:
            bar.update(metrics.num_done - bar.n)
    return update


def _result(cfg: RunConfig, resolved: Any, prep: Any, metrics: MetricsRecorder, depth: int,
            wall: float) -> RunResult:
    """Assemble the tables and the summary of one recorder's run."""
    return _assemble(cfg, resolved, build_tables(cfg, prep, metrics), metrics, depth, wall)


def _assemble(cfg: RunConfig, resolved: Any, t: Tables, metrics: MetricsRecorder, depth: int,
              wall: float) -> RunResult:
    """The RunResult of a run's tables: its summary and its config."""
    summary = summarize(t.requests, t.steps, t.timeline, t.itl_gaps, cfg, wall)
    summary["engine"] = "sync" if depth == 1 else f"batch_queue(depth={depth})"
    summary["num_prefix_skips"] = prefix_skips(metrics.policy)  # TensorRT-LLM skipping
    config = resolved.describe()
    config["engine_resolved"] = summary["engine"]
    core = accel.status()  # which build ran (speed only: both give the same tables)
    config["compiled_core"] = {"active": core.active, "reason": core.reason}
    return RunResult(t.requests, t.steps, t.timeline, summary, config, t.itl)
