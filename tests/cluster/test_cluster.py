"""The cluster world: one replica is today's single engine byte for byte; N replicas route every
request once, keep fast-forward exact, and a request alone on its replica runs as it would alone
on one engine."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest
from schedsim import RunConfig, simulate
from schedsim.run.cluster import ClusterResult, simulate_cluster
from schedsim.run.resolve import resolve_run
from schedsim.run.simulate import build_result, build_sim_run
from schedsim.run.workload import load, prepare
from support.fastforward import DIAGNOSTICS

pytestmark = pytest.mark.pure_python

TABLES = ("requests", "steps", "timeline", "itl")


def parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


def cluster_of(cfg: RunConfig, workload: pd.DataFrame | None = None) -> ClusterResult:
    """The cluster code path even for one replica (simulate() keeps one replica on the single path)."""
    df = load(cfg) if workload is None else workload
    prep = prepare(df, cfg, resolve_run(cfg).max_model_len)
    return simulate_cluster(cfg, df, prep, build_sim_run, build_result)


ONE_REPLICA = {
    "default": {"max_requests": 200},
    "aborts-kvfail": {
        "max_requests": 200,
        "abort_fraction": 0.1,
        "kv_load_failure_fraction": 0.05,
        "rate": 6.0,
    },
    "vllm-sync-starved": {
        "policy": "vllm",
        "max_requests": 150,
        "num_gpu_blocks": 700,
        "max_model_len": 8192,
    },
    "trtllm": {
        "policy": "trtllm:max-utilization",
        "max_requests": 120,
        "num_gpu_blocks": 700,
        "max_model_len": 8192,
    },
    "sglang": {"policy": "sglang-overlap", "max_requests": 120, "num_gpu_blocks": 700, "max_model_len": 8192},
    "ff-off": {"max_requests": 100, "fast_forward": False},
    "until": {"max_requests": 200, "max_sim_time": 20.0},
}


@pytest.mark.parametrize("name", ONE_REPLICA)
def test_one_replica_is_the_single_engine_byte_for_byte(name: str) -> None:
    cfg = RunConfig(record_itl=True, **ONE_REPLICA[name])
    single, cluster = simulate(cfg), cluster_of(cfg)
    for table in TABLES:
        assert parquet(getattr(single, table)) == parquet(getattr(cluster, table).drop(columns="replica")), (
            table
        )
    # a replica's stretches end at every arrival: the jump counts may differ, nothing else
    assert {k: v for k, v in single.summary.items() if k not in DIAGNOSTICS} == {
        k: v for k, v in cluster.summary.items() if k in single.summary and k not in DIAGNOSTICS
    }
    req = single.requests
    routed = (req["finish_reason"].fillna("") != "rejected") & (
        req["arrival_time"] <= (cfg.max_sim_time or np.inf)
    )
    assert list(cluster.routing["request_id"]) == list(req.loc[routed, "request_id"])
    own = req[routed].reset_index(drop=True)
    assert parquet(own) == parquet(cluster.replicas[0].requests)  # the replica's own: what it was sent


def mooncake(replicas: int, router: str, **kw) -> RunConfig:
    base = {"trace": "mooncake-synthetic", "max_requests": 160, "rate": 10.0, "num_gpu_blocks": 900}
    return RunConfig(**{**base, "max_model_len": 8192, "replicas": replicas, "router": router, **kw})


ROUTERS = ["round-robin", "least-outstanding", "least-kv", "power-of-two", "prefix-aware", "prefix-precise"]


@pytest.mark.parametrize("router", ROUTERS)
def test_fast_forward_stays_exact_per_replica(router: str) -> None:
    on = simulate(mooncake(3, router, abort_fraction=0.05))
    off = simulate(mooncake(3, router, abort_fraction=0.05, fast_forward=False))
    assert on.summary["fast_forward_jumps"] > 0
    for table in ("requests", "steps", "timeline", "routing", "load"):
        assert parquet(on.tables()[table]) == parquet(off.tables()[table]), table


def test_scrape_interval_shows_the_router_stale_numbers() -> None:
    live = simulate(mooncake(2, "least-kv", max_requests=60))
    stale = simulate(mooncake(2, "least-kv", max_requests=60, scrape_interval_s=1e6))
    assert (stale.load["kv_usage"] == 0.0).all()  # one scrape, at t=0, before any request
    assert (live.load["kv_usage"] > 0).any()
    assert (stale.routing["reason"] == "least-kv").all()


def test_every_request_is_routed_once_and_served_where_routed() -> None:
    res = simulate(mooncake(4, "power-of-two", abort_fraction=0.1))
    routing, req = res.routing, res.requests
    assert routing["request_id"].is_unique
    admitted = req[req["finish_reason"] != "rejected"]
    assert set(routing["request_id"]) == set(admitted["request_id"])
    assert (req.loc[req["finish_reason"] == "rejected", "replica"] == -1).all()
    by_id = dict(zip(routing["request_id"], routing["replica"], strict=True))
    assert all(by_id[r] == k for r, k in zip(admitted["request_id"], admitted["replica"], strict=True))
    for i, rep in enumerate(res.replicas):  # scheduled only on its own replica
        scheduled = set(rep.requests.loc[rep.requests["first_scheduled_time"].notna(), "request_id"])
        assert scheduled <= {r for r, k in by_id.items() if k == i}
    assert sum(res.summary["requests_per_replica"]) == len(routing)


def two_requests() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": ["a", "b"],
            "arrival_time": [0.0, 0.001],
            "prompt_tokens": [500, 300],
            "output_tokens": [20, 30],
        }
    )


def test_a_request_alone_on_its_replica_runs_as_alone_on_one_engine() -> None:
    wl = two_requests()
    cfg = RunConfig(replicas=2, router="round-robin", latency_model="roofline")
    res = simulate(cfg, workload=wl)
    assert list(res.requests["replica"]) == [0, 1]
    single = dataclasses.replace(cfg, replicas=1)
    for i, rid in enumerate(["a", "b"]):
        alone = simulate(single, workload=wl[wl["request_id"] == rid].reset_index(drop=True))
        mine = res.replicas[i].requests
        mine = mine[mine["request_id"] == rid].reset_index(drop=True)
        assert parquet(mine) == parquet(alone.requests)
        assert parquet(res.replicas[i].steps) == parquet(alone.steps)


def test_least_outstanding_sees_the_replica_state_at_the_arrival() -> None:
    wl = pd.DataFrame(
        {
            "request_id": ["a", "b", "c", "d"],
            "arrival_time": [0.0, 0.001, 10.0, 10.001],
            "prompt_tokens": [100, 100, 100, 100],
            "output_tokens": [4000, 5, 5, 5],
        }
    )
    res = simulate(RunConfig(replicas=2, router="least-outstanding", latency_model="roofline"), workload=wl)
    r = res.routing
    # a -> 0; b -> 1 (0 holds a); at 10 s b is done, a decodes: c -> 1; d: 1 each, ties -> 0
    assert list(r["replica"]) == [0, 1, 1, 0]
    assert list(r["chosen_outstanding"]) == [0, 0, 0, 1]
    assert res.requests.set_index("request_id").loc["a", "finish_time"] > 10.001


def test_the_cluster_summary_counts_the_fleet() -> None:
    res = simulate(mooncake(3, "prefix-aware"))
    s = res.summary
    assert s["num_replicas"] == 3 and s["router"] == "prefix-aware"
    assert sum(s["routing_reasons"].values()) == len(res.routing)
    cached = res.requests["num_cached_tokens"].sum()
    prompt = res.requests.loc[res.requests["first_scheduled_time"].notna(), "prompt_tokens"].sum()
    assert s["prefix_cache_hit_rate"] == pytest.approx(cached / prompt)
    assert s["gpu_busy_s"] == pytest.approx(sum(r.summary["gpu_busy_s"] for r in res.replicas))
    imbalance = res.routing["max_outstanding"] / res.routing["mean_outstanding"].replace(0, np.nan)
    assert s["mean_imbalance"] == pytest.approx(imbalance.fillna(1.0).mean())


def test_a_heterogeneous_fleet_runs_each_replica_on_its_own_config() -> None:
    cfg = mooncake(2, "round-robin", replica_overrides=[{"gpu": "a100-80gb", "policy": "vllm"}])
    res = simulate(cfg)
    assert [c["gpu"] for c in res.config["replica_configs"]] == ["a100-80gb", "h100-sxm"]
    assert [c["policy"] for c in res.config["replica_configs"]] == ["vllm", "vllm-async"]
    with pytest.raises(ValueError, match=r"replica_overrides\[0\]: \['trace'\] cannot differ"):
        RunConfig(replicas=2, replica_overrides=[{"trace": "x"}])


def test_a_fleet_stopped_at_max_sim_time_is_exact_and_routes_nothing_later() -> None:
    on = simulate(mooncake(3, "least-kv", max_sim_time=8.0, scrape_interval_s=0.5))
    off = simulate(mooncake(3, "least-kv", max_sim_time=8.0, scrape_interval_s=0.5, fast_forward=False))
    for table in ("requests", "steps", "timeline", "routing", "load"):
        assert parquet(on.tables()[table]) == parquet(off.tables()[table]), table
    assert on.routing["time"].max() <= 8.0
    assert (on.steps["schedule_time"] <= 8.0 + 1.0).all()
