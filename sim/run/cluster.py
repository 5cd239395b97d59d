"""`simulate` for a cluster: N replicas and a router process in one SimPy environment.

Each replica is assembled exactly as a single-engine run (same builder, its own RunConfig with the
replica's overrides: policy, KV pool, latency and CPU models), then fed through an inbox by the
router process. The result is a `ClusterResult`: cluster-wide tables (each row tagged with its
replica), the routing and load tables, the cluster summary, and each replica's own RunResult.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy
from schedsim.cluster.replica import Replica
from schedsim.cluster.routing import RouterProcess
from schedsim.cluster.tables import busy_totals, load_table, merged_requests, routing_table, stacked
from schedsim.metrics.summary import Slo, summarize
from schedsim.policies import Request
from schedsim.policies.routers import RouteRequest, make_router
from schedsim.run.config import RunConfig
from schedsim.run.resolve import resolve_run
from schedsim.run.result import RunResult
from schedsim.run.workload import PreparedWorkload
from schedsim.worlds.inbox import Inbox
from schedsim.worlds.inputs import InputStream

BUSY_KEYS = ("gpu_busy_s", "gpu_idle_fraction", "cpu_busy_s", "cpu_hidden_fraction")


@dataclass
class ClusterResult(RunResult):
    """A cluster run: the merged tables and summary, routing and load tables, each replica's run."""

    routing: pd.DataFrame = field(default_factory=pd.DataFrame)
    load: pd.DataFrame = field(default_factory=pd.DataFrame)
    replicas: list[RunResult] = field(default_factory=list)

    def tables(self) -> dict[str, pd.DataFrame]:
        """The run's tables plus routing and load."""
        return {**super().tables(), "routing": self.routing, "load": self.load}


def is_cluster(cfg: RunConfig) -> bool:
    """More than one replica, or a fleet described replica by replica."""
    return cfg.replicas > 1 or bool(cfg.replica_overrides)


def session_ids(df: pd.DataFrame) -> list[str | None]:
    """The workload's session column (None where a row has none)."""
    if "session_id" not in df.columns:
        return [None] * len(df)
    return [None if v is None or v is pd.NA or v != v else str(v) for v in df["session_id"].tolist()]


def simulate_cluster(
    cfg: RunConfig,
    df: pd.DataFrame,
    prep: PreparedWorkload,
    build_run: Callable[..., Any],
    build_result: Callable[..., RunResult],
    check_invariants: bool = False,
) -> ClusterResult:
    """Run the fleet on a prepared workload; `build_run`/`build_result` assemble and tabulate one
    replica exactly as a single-engine run does."""
    wall0 = time.perf_counter()
    env = simpy.Environment(initial_time=min(0.0, float(prep.columns.arrival.min()) if len(prep) else 0.0))
    rows = prep.arrival_rows()
    stream = InputStream(prep.columns.arrival[rows], prep.aborts, make=prep.request)
    router = make_router(cfg.router, **cfg.router_options)
    process: RouterProcess | None = None

    def feeder_next_time() -> float | None:
        return process.next_time() if process is not None else None

    def feeder_next_abort_time() -> float | None:
        return process.next_abort_poll_time() if process is not None else None

    replicas, runs, described = [], [], []
    for i in range(cfg.replicas):
        rcfg = cfg.replica_config(i)
        resolved = resolve_run(rcfg)
        inbox = Inbox(env, feeder_next_time, feeder_next_abort_time)
        run = build_run(
            rcfg,
            resolved.policy_options,
            resolved.latency_model,
            resolved.cpu_model,
            prep,
            check_invariants=check_invariants,
            inbox=inbox,
        )
        replicas.append(Replica(i, run.world, inbox))
        runs.append(run)
        described.append(resolved.describe())
    sessions = session_ids(df)
    process = RouterProcess(
        env,
        stream,
        rows.tolist(),
        replicas,
        router,
        _builder(prep, sessions),
        scrape_interval=cfg.scrape_interval_s,
        until=cfg.max_sim_time,
    )
    env.process(process.run())
    for run in runs:
        run.world.start()
    env.run()
    wall = time.perf_counter() - wall0
    results = [
        build_result(cfg.replica_config(i), described[i], prep, run, wall) for i, run in enumerate(runs)
    ]
    return _cluster_result(cfg, prep, process, results, _itl_gaps(runs), wall)


def _builder(
    prep: PreparedWorkload, sessions: list[str | None]
) -> Callable[[int], tuple[Request, RouteRequest, int]]:
    """Row -> its fresh Request, what the router reads of it, its target output length."""

    def build(row: int) -> tuple[Request, RouteRequest, int]:
        req = prep.request(row)
        info = RouteRequest(
            req.request_id, req.arrival_time, req.prompt_len, req.prompt_block_hashes, sessions[row]
        )
        return req, info, int(prep.targets[row])

    return build


def _cluster_result(
    cfg: RunConfig,
    prep: PreparedWorkload,
    process: RouterProcess,
    results: list[RunResult],
    gaps: list[tuple[np.ndarray, np.ndarray]],
    wall: float,
) -> ClusterResult:
    """Merge the replicas' tables, tabulate the routing, summarise the fleet; each replica's own
    result keeps only the requests routed to it."""
    routing = routing_table(process.log, prep.columns.ids)
    assigned = np.full(len(prep), -1, dtype=np.int64)
    assigned[routing["row"].to_numpy()] = routing["replica"].to_numpy()
    requests = merged_requests([r.requests for r in results], assigned)
    steps = stacked([r.steps for r in results])
    timeline = stacked([r.timeline for r in results])
    itl = stacked([r.itl for r in results if r.itl is not None]) if cfg.record_itl else None
    slo = Slo(cfg.slo_ttft_ms, cfg.slo_tpot_ms, cfg.slo_e2el_ms)
    every_gap = (np.concatenate([g[0] for g in gaps]), np.concatenate([g[1] for g in gaps]))
    summary = summarize(requests, steps, timeline.iloc[:0], every_gap, slo, wall)
    summary.update(busy_totals([r.summary for r in results]))
    summary.update(_engine_figures(summary, results))
    summary.update(_cluster_summary(cfg, routing, results))
    config = cfg.to_dict() | {"replica_configs": [r.config for r in results]}
    own = [_own_requests(r, assigned == i, gaps[i], slo, wall) for i, r in enumerate(results)]
    return ClusterResult(
        requests,
        steps,
        timeline,
        summary,
        config,
        itl,
        routing=routing,
        load=load_table(process.log),
        replicas=own,
    )


def _own_requests(
    result: RunResult, mine: np.ndarray, gaps: tuple[np.ndarray, np.ndarray], slo: Slo, wall: float
) -> RunResult:
    """A replica's result over the requests routed to it (its recorder spans the workload)."""
    requests = result.requests[mine].reset_index(drop=True)
    summary = {**result.summary, **summarize(requests, result.steps, result.timeline, gaps, slo, wall)}
    return dataclasses.replace(result, requests=requests, summary=summary)


def _engine_figures(summary: dict[str, Any], results: list[RunResult]) -> dict[str, Any]:
    """What each engine reports beyond the tables (engine mode, policy counters): counts summed,
    a value all replicas share kept, differing values listed per replica."""
    out: dict[str, Any] = {}
    for key, value in results[0].summary.items():
        if key in summary:
            continue
        values = [r.summary.get(key) for r in results]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            out[key] = sum(values)
        elif all(v == value for v in values):
            out[key] = value
        else:
            out[key] = values
    return out


def _itl_gaps(runs: list[Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each replica's inter-token gaps, run-length encoded."""
    return [run.metrics.itl_gaps.arrays() for run in runs]


def _cluster_summary(cfg: RunConfig, routing: pd.DataFrame, results: list[RunResult]) -> dict[str, Any]:
    """Fleet figures: routing mix, requests per replica, load imbalance."""
    imbalance = routing["imbalance"].to_numpy(float)
    counts = routing["reason"].value_counts()
    return {
        "num_replicas": cfg.replicas,
        "router": cfg.router,
        "requests_per_replica": [int((routing["replica"] == i).sum()) for i in range(cfg.replicas)],
        "routing_reasons": {str(k): int(v) for k, v in counts.items() if v},
        "mean_imbalance": float(imbalance.mean()) if len(imbalance) else 1.0,
        "p99_imbalance": float(np.percentile(imbalance, 99)) if len(imbalance) else 1.0,
        "replica_prefix_cache_hit_rate": [r.summary["prefix_cache_hit_rate"] for r in results],
        "replica_request_throughput": [r.summary["request_throughput"] for r in results],
        "max_replica_gpu_busy_s": max(r.summary["gpu_busy_s"] for r in results),
        "fast_forward_jumps": sum(r.summary.get("fast_forward_jumps", 0) for r in results),
        "fast_forward_steps": sum(r.summary.get("fast_forward_steps", 0) for r in results),
    }
