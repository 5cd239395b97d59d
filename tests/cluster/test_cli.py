"""`schedsim run --replicas N --router NAME`, `schedsim routers`, and a user's router registered
from a `--plugin` module, run through the command line like the shipped ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

CLI = [sys.executable, "-m", "schedsim.cli.main"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, env=env)


PLUGIN = textwrap.dedent(
    '''
    """A user's router: every request to the last replica."""
    from schedsim.policies.routers import Decision, RouterConfig, register_router


    @register_router("always-last", "every request to the highest replica index")
    class AlwaysLast:
        def __init__(self, config: RouterConfig) -> None:
            pass

        def route(self, request, views):
            return Decision(len(views) - 1, "last")
    '''
)


def test_run_a_cluster_with_a_plugin_router(tmp_path: Path) -> None:
    (tmp_path / "my_router.py").write_text(PLUGIN)
    out = cli("routers", "--plugin", "my_router", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "always-last" in out.stdout and "prefix-aware" in out.stdout
    args = ["run", "--plugin", "my_router", "--replicas", "3", "--router", "always-last"]
    out = cli(*args, "--max-requests", "30", "--no-plots", "--no-progress", "--out", "o", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["requests_per_replica"] == [0, 0, 30]
    routing = pd.read_parquet(tmp_path / "o" / "routing.parquet")
    assert set(routing["reason"]) == {"last"} and len(routing) == 30
    assert (tmp_path / "o" / "load.parquet").exists()


def test_a_bad_router_name_is_one_line(tmp_path: Path) -> None:
    out = cli("run", "--replicas", "2", "--router", "nope", "--max-requests", "5", "--out", "o", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "unknown router 'nope'" in out.stderr


def test_a_heterogeneous_fleet_from_toml(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text(
        textwrap.dedent(
            """
            replicas = 2
            router = "least-outstanding"
            max_requests = 20

            [[replica_overrides]]
            gpu = "h200"

            [[replica_overrides]]
            policy = "vllm"
            """
        )
    )
    out = cli("run", "--config", "fleet.toml", "--no-progress", "--out", "o", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for png in ("replica_load.png", "routing_mix.png", "batch_kv.png"):
        assert (tmp_path / "o" / png).stat().st_size > 0, png
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert [(c["gpu"], c["policy"]) for c in config["replica_configs"]] == [
        ("h200", "vllm-async"),
        ("h100-sxm", "vllm"),
    ]


def test_compare_and_sweep_take_the_cluster_keys(tmp_path: Path) -> None:
    (tmp_path / "fleet4.toml").write_text('replicas = 4\nrouter = "least-outstanding"\n')
    (tmp_path / "fleet2.toml").write_text('replicas = 2\nrouter = "power-of-two"\n')
    out = cli(
        "compare", "--variant", "fleet4.toml", "--variant", "fleet2.toml", "--max-requests", "40",
        "--rate", "8", "--no-plots", "--no-progress", "--out", "c", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    table = pd.read_parquet(tmp_path / "c" / "compare.parquet")
    assert list(table["label"]) == ["vllm-async", "fleet4", "fleet2"]  # the base run first
    assert pd.read_parquet(tmp_path / "c" / "fleet4" / "routing.parquet")["replica"].nunique() == 4
    out = cli(
        "sweep", "--grid", "replicas=1,3", "--grid", "router=round-robin,least-kv", "--max-requests", "30",
        "--rate", "8", "--workers", "1", "--no-progress", "--out", "s", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert any(name.endswith(".parquet") for name in files), files


def test_a_disaggregated_run_writes_the_transfers_and_goodput(tmp_path: Path) -> None:
    args = ["run", "--pd", "1:2", "--interconnect", "ib-200g", "--slo-ttft-ms", "200", "--slo-tpot-ms", "50"]
    out = cli(
        *args,
        "--max-requests",
        "20",
        "--rate",
        "6",
        "--no-plots",
        "--no-progress",
        "--out",
        "o",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    transfers = pd.read_parquet(tmp_path / "o" / "transfers.parquet")
    assert len(transfers) == 20 and set(transfers["link"]) == {"ib-200g"}
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["kv_bytes_transferred"] == int(transfers["bytes"].sum())
    assert summary["num_prefill_replicas"] == 1 and summary["num_decode_replicas"] == 2
    assert 0 < summary["request_goodput"] <= summary["request_throughput"]
    bad = cli("run", "--pd", "1:1", "--policy", "orca", "--max-requests", "5", "--out", "b", cwd=tmp_path)
    assert bad.returncode != 0 and "SupportsKVTransfer" in bad.stderr


def test_compare_and_sweep_take_the_pd_keys(tmp_path: Path) -> None:
    (tmp_path / "pd.toml").write_text('pd = "1:1"\ninterconnect = "eth-100g"\ndecode_router = "least-kv"\n')
    out = cli(
        "compare", "--variant", "pd.toml", "--max-requests", "20", "--rate", "6", "--slo-ttft-ms", "300",
        "--no-plots", "--no-progress", "--out", "c", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    table = pd.read_parquet(tmp_path / "c" / "compare.parquet")
    assert list(table["label"]) == ["vllm-async", "pd"]
    assert (tmp_path / "c" / "pd" / "transfers.parquet").exists()
    out = cli(
        "sweep", "--grid", "pd=1:1,1:2", "--grid", "interconnect=ib-400g,eth-100g", "--max-requests", "16",
        "--rate", "6", "--workers", "1", "--no-progress", "--out", "s", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    runs = pd.read_parquet(next(p for p in (tmp_path / "s").iterdir() if p.suffix == ".parquet"))
    assert len(runs) == 4 and set(runs["pd"]) == {"1:1", "1:2"}
