"""`schedsim validate`'s simulator side jumps too, with the same tables as step by step."""

from __future__ import annotations

import dataclasses

import pytest
from schedsim import RunConfig
from schedsim.experiments.validate import simulate_prepared
from schedsim.run.resolve import resolve_run
from schedsim.run.workload import load, prepare

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


@pytest.mark.parametrize("policy", ["vllm", "vllm-async"])
def test_simulate_prepared_identical_with_fast_forward(policy):
    cfg = RunConfig(policy=policy, max_requests=80, rate=8.0)
    resolved = resolve_run(cfg)
    prep = prepare(load(cfg), cfg, resolved.max_model_len)
    runs = {}
    for ff in (False, True):
        c = dataclasses.replace(cfg, fast_forward=ff)
        runs[ff] = simulate_prepared(c, prep, resolved.latency_model, resolved.policy_options, "test")
        jumped = runs[ff].summary["fast_forward_steps"]
        assert (jumped > 100) == ff  # jumps happen only with the switch on
    for name in ("requests", "steps", "timeline"):
        assert getattr(runs[False], name).equals(getattr(runs[True], name)), name
