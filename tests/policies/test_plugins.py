"""Policies from outside the package: the example plugin (examples/spf_policy, installed by
`make test` as its own distribution) found through the `schedsim.policies` entry points, and a
module named with `--plugin`; both run through `schedsim run/compare` like built-in policies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from schedsim.policies import ENTRY_POINT_GROUP, get_policy_info, make_policy
from support.schedloop import make_request, run

CLI = [sys.executable, "-m", "schedsim.cli.main"]


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`schedsim ...` in a fresh interpreter (nothing imported by this test process)."""
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})}
    )


def test_the_example_plugin_is_installed_as_an_entry_point() -> None:
    names = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert names.get("spf") == "spf_policy", "install it: pip install -e examples/spf_policy (make test does)"
    assert get_policy_info("spf").config_cls.__name__ == "SpfConfig"


def test_run_and_compare_find_the_installed_plugin(tmp_path: Path) -> None:
    out = _cli(
        "run",
        "--policy",
        "spf",
        "--max-requests",
        "60",
        "--no-plots",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["num_finished"] == 60
    out = _cli(
        "compare",
        "--policies",
        "vllm",
        "spf",
        "--max-requests",
        "40",
        "--no-plots",
        "--no-progress",
        "--out",
        str(tmp_path / "cmp"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert {"vllm", "spf"} <= set(out.stdout.split("\n")[0].split())


def _spf(**kw: int):
    """The plugin's policy with a tiny budget and one seat, so admission order is visible."""
    base = dict(
        num_gpu_blocks=200, block_size=16, max_model_len=512, max_num_seqs=1, max_num_batched_tokens=512
    )
    return make_policy("spf", **{**base, **kw})


def _admission_order(
    policy, prompts: dict[str, int], later: dict[int, dict[str, int]] | None = None
) -> list[str]:
    """Who joins the batch, in order; `later[i]` arrive before loop iteration i."""
    arrivals = {
        it: [make_request(rid, p, 2) for rid, p in reqs.items()] for it, reqs in (later or {}).items()
    }
    trace = run(policy, [make_request(rid, p, 2) for rid, p in prompts.items()], arrivals=arrivals)
    return [rid for plan in trace.plans for rid in plan.new_req_ids]


def test_shortest_prompt_first() -> None:
    assert _admission_order(_spf(), {"long": 300, "short": 20, "mid": 100}) == ["short", "mid", "long"]


def test_a_request_waiting_max_wait_steps_goes_first() -> None:
    """One seat, two steps a request (prefill, then its second token): a short request arrives
    every second iteration. Uncapped, the long prompt waits for all of them; with a cap of 5 it
    goes at the first admission where it has waited 5 steps, ahead of the shorter ones queued."""
    later = {2: {"b": 20}, 4: {"c": 30}, 6: {"d": 15}}
    assert _admission_order(_spf(max_wait_steps=1000), {"long": 300, "a": 10}, later) == [
        "a",
        "b",
        "c",
        "d",
        "long",
    ]
    assert _admission_order(_spf(max_wait_steps=5), {"long": 300, "a": 10}, later) == [
        "a",
        "b",
        "c",
        "long",
        "d",
    ]
    assert _admission_order(_spf(max_wait_steps=4), {"long": 300, "a": 10}, later) == [
        "a",
        "b",
        "long",
        "d",
        "c",
    ]


def test_plugin_option_imports_a_module_that_registers_a_policy(tmp_path: Path) -> None:
    (tmp_path / "my_fcfs.py").write_text(
        textwrap.dedent("""
        from schedsim.policies import register_policy
        from schedsim.policies.baselines import SarathiConfig, SarathiPolicy

        register_policy("my-fcfs", "Sarathi under another name, from a local module",
                        SarathiConfig)(SarathiPolicy)
    """)
    )
    env = {"PYTHONPATH": str(tmp_path)}
    listed = _cli("policies", "--plugin", "my_fcfs", cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "my-fcfs" in listed.stdout, listed.stderr
    ran = _cli(
        "run",
        "--plugin",
        "my_fcfs",
        "--policy",
        "my-fcfs",
        "--max-requests",
        "30",
        "--no-plots",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    missing = _cli("run", "--plugin", "no_such_module", "--policy", "spf", "--no-plots", cwd=tmp_path)
    assert missing.returncode == 2 and "plugin module 'no_such_module'" in missing.stderr


@pytest.mark.parametrize("bad", [0, -3])
def test_the_plugin_validates_its_config(bad: int) -> None:
    with pytest.raises(ValueError, match="max_wait_steps"):
        _spf(max_wait_steps=bad)


def test_a_broken_plugin_is_named_and_the_others_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedsim.policies import plugin_registry, registry

    class Broken:
        name, value = "broken", "no_such_plugin_module"

        def load(self) -> None:
            raise ModuleNotFoundError("No module named 'no_such_plugin_module'")

    monkeypatch.setattr(registry.REGISTRY, "loaded", False)
    monkeypatch.setattr(registry.REGISTRY, "failed", {})
    monkeypatch.setattr(plugin_registry, "entry_points", lambda group: [Broken()])
    with pytest.warns(UserWarning, match="policy plugin 'broken'"):
        assert get_policy_info("vllm").name == "vllm"
    with pytest.raises(ValueError, match="plugin 'broken' failed to load: no_such_plugin_module"):
        get_policy_info("broken")


def test_a_full_pool_preempts_the_newest_and_admits_nothing_that_step() -> None:
    """4 usable blocks, two 16-token prompts of 32 outputs: both start; when the pool fills, the
    newest ('b') is recomputed, the step that preempted it decodes 'a' alone and admits nobody."""
    policy = _spf(num_gpu_blocks=5, max_num_seqs=4)
    trace = run(policy, [make_request("a", 16, 32), make_request("b", 16, 32)])
    assert trace.sched()[0] == {"a": 16, "b": 16}
    pre = next(p for p in trace.plans if p.preempted_req_ids)
    assert pre.preempted_req_ids == ["b"] and dict(pre.num_scheduled_tokens) == {"a": 1}
    assert not pre.new_req_ids and not pre.resumed_req_ids
    later = trace.plans[trace.plans.index(pre) + 1 :]
    assert any(p.resumed_req_ids == ["b"] for p in later), "the victim resumes"
    assert trace.tokens["a"] == trace.tokens["b"] == [1000 + i for i in range(32)]
