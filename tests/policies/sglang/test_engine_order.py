"""The simulator's batch-queue engine drives sglang-overlap in SGLang's overlap-loop order."""

from __future__ import annotations

import pandas as pd
import pytest
from schedsim import RunConfig, simulate

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _cpu_order(policy: str, **kw) -> list[tuple[str, int]]:
    """(phase, step) of the schedule and update phases, in simulated-time order."""
    wl = pd.DataFrame(
        {
            "request_id": ["a", "b", "c"],
            "arrival_time": [0.0, 0.0, 0.05],
            "prompt_tokens": [300, 40, 120],
            "output_tokens": [6, 9, 4],
        }
    )
    cfg = RunConfig(policy=policy, max_model_len=4096, num_gpu_blocks=600, seed=0, **kw)
    res = simulate(cfg, workload=wl, check_invariants=True)
    assert res.summary["num_finished"] == 3
    cpu = res.timeline[res.timeline["resource"] == "cpu"].sort_values("start", kind="stable")
    cpu = cpu[cpu["kind"].isin(["schedule", "update_from_output"])]
    return list(zip(cpu["kind"], cpu["step"], strict=True))


def test_batch_queue_schedules_k_before_processing_k_minus_1():
    """event_loop_overlap: schedule k (and launch it), then process k-1, then schedule k+1."""
    order = _cpu_order("sglang-overlap")
    sched = {k: i for i, (kind, k) in enumerate(order) if kind == "schedule"}
    upd = {k: i for i, (kind, k) in enumerate(order) if kind == "update_from_output"}
    assert len(sched) == len(upd) >= 10
    for k in range(1, len(sched)):
        assert sched[k] < upd[k - 1], k
        if k + 1 in sched:
            assert upd[k - 1] < sched[k + 1], k


def test_disable_overlap_processes_each_batch_before_the_next_schedule():
    """SGLang's normal loop: schedule k, run k, process k, then schedule k+1."""
    order = _cpu_order("sglang-overlap", policy_options={"disable_overlap_schedule": True})
    kinds = [kind for kind, _ in order]
    assert kinds == ["schedule", "update_from_output"] * (len(kinds) // 2)
