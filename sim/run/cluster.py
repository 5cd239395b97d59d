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
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import simpy
from schedsim.cluster.interconnect import get_interconnect, kv_block_bytes_per_gpu
from schedsim.cluster.pd import HandOff, PDInbox
from schedsim.cluster.replica import Replica
from schedsim.cluster.routing import RouterProcess
from schedsim.cluster.tables import (
    busy_totals,
    load_table,
    merged_requests,
    pd_requests,
    pd_summary,
    routing_table,
    stacked,
    transfers_table,
)
from schedsim.cluster.transfers import TransferHub
from schedsim.latency.specs import get_model_spec
from schedsim.metrics.summary import Slo, summarize
from schedsim.policies import EngineFailure, KVTransferParams, Request, SupportsKVTransfer, get_policy_info
from schedsim.policies.routers import RouteRequest, make_router
from schedsim.run.config import RunConfig
from schedsim.run.resolve import check_pd_policy, resolve_run
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
    # prefill/decode disaggregation: one row per KV transfer (None: colocated replicas)
    transfers: pd.DataFrame | None = None

    def tables(self) -> dict[str, pd.DataFrame]:
        """The run's tables plus routing and load (and transfers with pd)."""
        out = {**super().tables(), "routing": self.routing, "load": self.load}
        if self.transfers is not None:
            out["transfers"] = self.transfers
        return out


def is_cluster(cfg: RunConfig) -> bool:
    """More than one replica, a fleet described replica by replica, or prefill/decode pools."""
    return cfg.replicas > 1 or bool(cfg.replica_overrides) or cfg.pd is not None


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
    pools = cfg.pd_pools()
    num_prefill = pools[0] if pools is not None else cfg.replicas
    router = make_router(cfg.prefill_router or cfg.router if pools else cfg.router, **cfg.router_options)
    process: RouterProcess | None = None

    def feeder_next_time() -> float | None:
        return process.next_time() if process is not None else None

    def feeder_next_abort_time() -> float | None:
        return process.next_abort_poll_time() if process is not None else None

    replicas, runs, described, configs = [], [], [], []
    for i in range(cfg.num_replicas()):
        rcfg = cfg.replica_config(i)
        if pools is not None:
            rcfg = _pool_config(rcfg, i < num_prefill)
        resolved = resolve_run(rcfg)
        inbox = (PDInbox if pools else Inbox)(env, feeder_next_time, feeder_next_abort_time)
        run = build_run(
            rcfg,
            resolved.policy_options,
            resolved.latency_model,
            resolved.cpu_model,
            prep,
            check_invariants=check_invariants,
            inbox=inbox,
        )
        if pools is not None:
            check_pd_policy(run.policy, i, rcfg.policy)
        replicas.append(Replica(i, run.world, inbox))
        runs.append(run)
        described.append(resolved.describe())
        configs.append(rcfg)
    sessions = session_ids(df)
    build = _builder(prep, sessions)
    prefill_requests: dict[str, Request] = {}
    pool = list(range(num_prefill))
    process = RouterProcess(
        env,
        stream,
        rows.tolist(),
        replicas,
        router,
        build if pools is None else _prefill_builder(build, prefill_requests),
        scrape_interval=cfg.scrape_interval_s,
        until=cfg.max_sim_time,
        pool=pool,
    )
    handoff: HandOff | None = None
    hub: TransferHub | None = None
    if pools is not None:
        decode_router = make_router(cfg.decode_router or cfg.router, **cfg.router_options)
        handoff = HandOff(
            env,
            replicas,
            range(num_prefill, len(replicas)),
            decode_router,
            build,
            process,
            cfg.scrape_interval_s <= 0,
            [_takes_prefill_token(run.policy) for run in runs],
        )
        handoff.prefill_requests = prefill_requests
        hub = _transfer_hub(cfg, env, configs, handoff, prep)
        handoff.hub = hub
        for rep in replicas:
            _wire(rep, hub)
    env.process(process.run())
    procs = [run.world.start() for run in runs]
    if pools is not None:
        env.process(_close_decode_pool(env, procs[:num_prefill], replicas[num_prefill:], process))
    try:
        env.run()
    except EngineFailure as exc:
        name_replica(exc, procs)
        raise
    if hub is not None and cfg.max_sim_time is None:
        _check_ended(runs, hub)
    wall = time.perf_counter() - wall0
    results = [build_result(configs[i], described[i], prep, run, wall) for i, run in enumerate(runs)]
    if handoff is not None and hub is not None:
        return _pd_result(cfg, prep, process, handoff, hub, results, _itl_gaps(runs), wall)
    return _cluster_result(cfg, prep, process, results, _itl_gaps(runs), wall)


def name_replica(exc: EngineFailure, procs: list[Any]) -> None:
    """Note which replica's policy stopped (SimPy re-raises a copy whose cause is the original)."""
    failed = exc.__cause__ if isinstance(exc.__cause__, EngineFailure) else exc
    for i, proc in enumerate(procs):
        if proc.triggered and not proc.ok and proc.value is failed:
            exc.add_note(f"replica {i}")


def _takes_prefill_token(policy: object) -> bool:
    """Whether a decode replica's engine continues from the prefill's first token."""
    return isinstance(policy, SupportsKVTransfer) and policy.decode_takes_prefill_token()


def _pool_config(rcfg: RunConfig, prefill: bool) -> RunConfig:
    """A replica's config in its pool: a KV connector role where the policy has one (vLLM's
    kv_role, unless given), and no fast-forward on the prefill side (it never decodes)."""
    fields = {f.name for f in dataclasses.fields(get_policy_info(rcfg.policy).config_cls)}
    over: dict[str, Any] = {}
    if "kv_role" in fields and rcfg.policy_options.get("kv_role") is None:
        role = "kv_producer" if prefill else "kv_consumer"
        over["policy_options"] = {**rcfg.policy_options, "kv_role": role}
    if prefill:
        over["fast_forward"] = False
    return dataclasses.replace(rcfg, **over)


def _check_ended(runs: list[Any], hub: TransferHub) -> None:
    """Every engine ended: one still waiting holds KV no decode replica ever read."""
    for i, run in enumerate(runs):
        if not run.world.finished:
            held = sorted(hub.ports[i].announced)[:10]
            raise RuntimeError(
                f"replica {i} never ended: it waits for KV transfers that never came "
                f"(sends announced and never loaded: {held})"
            )


def _prefill_builder(
    build: Callable[[int], tuple[Request, RouteRequest, int]], made: dict[str, Request]
) -> Callable[[int], tuple[Request, RouteRequest, int]]:
    """Row -> its prefill-side Request: the first token only, its KV held for the decode side
    (kept in `made` until the hand-off reads how it finished)."""

    def prefill(row: int) -> tuple[Request, RouteRequest, int]:
        req, info, target = build(row)
        req.max_tokens = 1
        req.kv_transfer_params = KVTransferParams(do_remote_decode=True)
        made[req.request_id] = req
        return req, info, target

    return prefill


def _transfer_hub(
    cfg: RunConfig, env: simpy.Environment, configs: list[RunConfig], handoff: HandOff, prep: PreparedWorkload
) -> TransferHub:
    """The link between the pools: each replica's KV block bytes per GPU, the load failures."""
    block = [kv_block_bytes_per_gpu(get_model_spec(c.model), c.tp, cfg.block_size) for c in configs]
    tp = [c.tp for c in configs]
    hub = TransferHub(
        env, get_interconnect(cfg.interconnect), block, tp, cfg.block_size, handoff, prep.kv_load_failures
    )
    handoff_rows(handoff, prep)
    return hub


def handoff_rows(handoff: HandOff, prep: PreparedWorkload) -> None:
    """Request id -> workload row, for the hand-off's decode requests."""
    handoff.rows = {rid: i for i, rid in enumerate(prep.columns.ids)}


def _wire(rep: Replica, hub: TransferHub) -> None:
    """A replica's world and inbox use its port; its executor leaves load failures to the link."""
    port = hub.ports[rep.index]
    rep.world.kv_port = port
    assert isinstance(rep.inbox, PDInbox)
    rep.inbox.port = port
    hub.inboxes[rep.index] = rep.inbox
    rep.world.executor.oracle.kv_fail.clear()


def _close_decode_pool(
    env: simpy.Environment, prefill: list[Any], decode: list[Replica], process: RouterProcess
) -> Any:
    """Once every prefill engine has ended, nothing more reaches the decode pool."""
    yield env.all_of(prefill)
    if process.stream.next_time() is None:
        for rep in decode:
            rep.inbox.close()


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
    fleet = _fleet(cfg, requests, routing, results, gaps, wall)
    own = [_own_requests(r, assigned == i, gaps[i], fleet.slo, wall) for i, r in enumerate(results)]
    return fleet.result(
        requests,
        routing=routing,
        load=load_table(process.log),
        replicas=own,
    )


def _pd_result(
    cfg: RunConfig,
    prep: PreparedWorkload,
    process: RouterProcess,
    handoff: HandOff,
    hub: TransferHub,
    results: list[RunResult],
    gaps: list[tuple[np.ndarray, np.ndarray]],
    wall: float,
) -> ClusterResult:
    """A disaggregated fleet's result: requests across both sides, both pools' routing and load,
    the transfers table, and the transfer figures in the summary."""
    prefill_routing = routing_table(process.log, prep.columns.ids)
    decode_routing = routing_table(handoff.log, prep.columns.ids)
    routing = _by_time(prefill_routing, decode_routing)
    prefill = np.full(len(prep), -1, dtype=np.int64)
    prefill[prefill_routing["row"].to_numpy()] = prefill_routing["replica"].to_numpy()
    decode = np.full(len(prep), -1, dtype=np.int64)
    decode[decode_routing["row"].to_numpy()] = decode_routing["replica"].to_numpy()
    first_in = np.asarray(handoff.first_token_in, dtype=bool)[np.maximum(decode, 0)]
    requests = pd_requests([r.requests for r in results], prefill, decode, first_in)
    fleet = _fleet(cfg, requests, routing, results, gaps, wall)
    fleet.summary["router"] = [cfg.prefill_router or cfg.router, cfg.decode_router or cfg.router]
    transfers = transfers_table(hub.log)
    num_prefill = len(process.pool)
    fleet.summary.update(pd_summary(transfers, num_prefill, len(handoff.pool), cfg.interconnect))
    own = [
        _own_requests(r, (prefill if i < num_prefill else decode) == i, gaps[i], fleet.slo, wall)
        for i, r in enumerate(results)
    ]
    load = _by_time(load_table(process.log), load_table(handoff.log))
    return fleet.result(
        requests,
        routing=routing,
        load=load,
        replicas=own,
        transfers=transfers,
    )


class FleetTables(NamedTuple):
    """The tables and summary every fleet result has, merged over its replicas."""

    steps: pd.DataFrame
    timeline: pd.DataFrame
    itl: pd.DataFrame | None
    slo: Slo
    summary: dict[str, Any]
    config: dict[str, Any]

    def result(self, requests: pd.DataFrame, **cluster_tables: Any) -> ClusterResult:
        """The fleet's ClusterResult: these tables, the merged requests and the cluster's own."""
        return ClusterResult(
            requests, self.steps, self.timeline, self.summary, self.config, self.itl, **cluster_tables
        )


def _fleet(
    cfg: RunConfig,
    requests: pd.DataFrame,
    routing: pd.DataFrame,
    results: list[RunResult],
    gaps: list[tuple[np.ndarray, np.ndarray]],
    wall: float,
) -> FleetTables:
    """The replicas' steps, timelines and ITL stacked; the summary over the merged requests."""
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
    return FleetTables(steps, timeline, itl, slo, summary, config)


def _by_time(prefill: pd.DataFrame, decode: pd.DataFrame) -> pd.DataFrame:
    """Both pools' rows in time order (prefill first at equal times), with a pool column."""
    parts = []
    for name, part in (("prefill", prefill), ("decode", decode)):
        part = part.copy()
        part.insert(1, "pool", pd.array([name] * len(part), dtype="string"))
        parts.append(part)
    both = pd.concat(parts, ignore_index=True)
    if "reason" in both.columns:
        both["reason"] = both["reason"].astype("string")
    return both.sort_values("time", kind="stable").reset_index(drop=True)


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
        "num_replicas": cfg.num_replicas(),
        "router": cfg.router,
        "requests_per_replica": [int((routing["replica"] == i).sum()) for i in range(cfg.num_replicas())],
        "routing_reasons": {str(k): int(v) for k, v in counts.items() if v},
        "mean_imbalance": float(imbalance.mean()) if len(imbalance) else 1.0,
        "p99_imbalance": float(np.percentile(imbalance, 99)) if len(imbalance) else 1.0,
        "replica_prefix_cache_hit_rate": [r.summary["prefix_cache_hit_rate"] for r in results],
        "replica_request_throughput": [r.summary["request_throughput"] for r in results],
        "max_replica_gpu_busy_s": max(r.summary["gpu_busy_s"] for r in results),
        "fast_forward_jumps": sum(r.summary.get("fast_forward_jumps", 0) for r in results),
        "fast_forward_steps": sum(r.summary.get("fast_forward_steps", 0) for r in results),
    }
