"""Time schedsim's own policies' schedule() and update_from_output() on this machine.

This measures the simulator's policy code (compiled or interpreted), not an engine's host
overhead: a real engine's scheduler, input preparation and output processing cost one to two
orders of magnitude more per request (cpu_cost.py). The result is a "cpu-cost" file whose
"measures" says so; fit an engine's host terms with `schedsim calibrate --measurements`.

Steady decode batches of B requests are driven through a registered policy in-process; the median
time of each call per B is fitted to base + per_req x B. prepare_inputs and d2h_copy are model-
runner work that no policy does, so they keep their documented defaults (the real backend's
calibration runs can measure them).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import numpy as np
from schedsim.policies import Request, StepResult, make_policy

from .cpu_cost import CpuCostConfig, PhaseCost


def _time_policy(policy_name: str, batch: int, steps: int) -> tuple[list[float], list[float]]:
    """(schedule, update) seconds per step of a policy decoding `batch` requests."""
    policy = make_policy(
        policy_name,
        block_size=16,
        num_gpu_blocks=batch * 64 + 512,
        max_num_seqs=batch,
        max_num_batched_tokens=max(2048, batch * 32),
        max_model_len=4096,
    )
    for i in range(batch):
        policy.add_request(
            Request(request_id=f"r{i}", arrival_time=0.0, prompt_len=32, max_tokens=10_000, ignore_eos=True)
        )
    sched, upd = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        plan = policy.schedule()
        t1 = time.perf_counter()
        result = StepResult(
            step_id=plan.step_id, sampled_token_ids={rid: [100] for rid in plan.num_scheduled_tokens}
        )
        t2 = time.perf_counter()
        policy.update_from_output(plan, result)
        t3 = time.perf_counter()
        sched.append(t1 - t0)
        upd.append(t3 - t2)
    warm = steps // 4  # skip the prefill steps and let the batch settle into decoding
    return sched[warm:], upd[warm:]


def _line(batches: list[int], times: list[float]) -> PhaseCost:
    """Least-squares base + per_req x B, clipped at zero."""
    a = np.column_stack([np.ones(len(batches)), np.asarray(batches, dtype=float)])
    (base, per_req), *_ = np.linalg.lstsq(a, np.asarray(times), rcond=None)
    return PhaseCost(base=max(0.0, float(base)), per_req=max(0.0, float(per_req)))


def calibrate_cpu_costs(
    policy: str = "vllm",
    batches: tuple[int, ...] = (1, 8, 32, 64, 128, 256),
    steps: int = 40,
    base: CpuCostConfig | None = None,
) -> CpuCostConfig:
    """CPU costs of `policy` measured on this machine (schedule, update_from_output)."""
    if not batches or min(batches) < 1 or steps < 4:
        raise ValueError("calibrate_cpu_costs: batches must be >= 1 and steps >= 4")
    base = base or CpuCostConfig()
    sched, upd = [], []
    for b in batches:
        s, u = _time_policy(policy, b, steps)
        sched.append(statistics.median(s))
        upd.append(statistics.median(u))
    phases = dict(base.phases)
    phases["schedule"] = _line(list(batches), sched)
    phases["update_from_output"] = _line(list(batches), upd)
    return replace(
        base,
        phases=phases,
        source=f"calibrate_cpu_costs(policy={policy!r}) on this machine; prepare_inputs/d2h_copy: defaults",
    )
