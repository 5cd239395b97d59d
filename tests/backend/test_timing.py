"""Host versus device time: a step's device time starts after its inputs are packed, so calibration
(synchronous) and replay (asynchronous) measure the same thing, and the host's share is kept apart."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.backend.calibrate import CalibrationGrid, measure_steps  # noqa: E402
from schedsim.backend.input_buffers import InputBuffers  # noqa: E402
from schedsim.policies import Request, StepPlan  # noqa: E402

SLOW = 0.25  # seconds of host packing injected per step


@pytest.fixture()
def slow_packing(monkeypatch):
    """Packing inputs takes SLOW seconds longer (a stand-in for a large batch on a slow host)."""
    original = InputBuffers.stage

    def stage(self, batch):
        time.sleep(SLOW)
        return original(self, batch)

    monkeypatch.setattr(InputBuffers, "stage", stage)


def executor(**kw) -> RealExecutor:
    return RealExecutor.from_config(
        ExecutorConfig(model="tiny", block_size=4, num_blocks=64, seed=1, device="cpu", **kw)
    )


def one_step(ex: RealExecutor):
    prompt = list(range(3, 20))
    req = Request("a", 0.0, len(prompt), 2, prompt_token_ids=prompt)
    n = len(prompt)
    plan = StepPlan(
        step_id=0,
        num_scheduled_tokens={"a": n},
        total_num_scheduled_tokens=n,
        context_lens={"a": 0},
        block_ids={"a": [1, 2, 3, 4, 5]},
        new_req_ids=["a"],
    )
    handle = ex.launch(plan, {"a": req})
    ex.collect(handle)
    return handle


@pytest.mark.parametrize("worker", [False, True])
def test_device_time_excludes_packing_the_inputs(slow_packing, worker):
    ex = executor(cpu_worker_thread=worker)
    handle = one_step(ex)
    ex.close()
    assert handle.host_prepare_s >= SLOW
    assert handle.device_seconds < SLOW  # the tiny forward takes milliseconds
    assert handle.device_start >= handle.launch_time + SLOW
    # thread CPU time of the forward: never more than its wall interval
    assert 0 < handle.device_seconds <= handle.device_end - handle.device_start + 1e-3


@pytest.fixture()
def descheduled_forward(monkeypatch):
    """The forward also waits SLOW seconds off the CPU (as when another process holds the core)."""
    original = RealExecutor._forward_and_sample

    def forward(self, handle):
        time.sleep(SLOW)
        return original(self, handle)

    monkeypatch.setattr(RealExecutor, "_forward_and_sample", forward)


@pytest.mark.parametrize("worker", [False, True])
def test_cpu_step_time_is_thread_cpu_time_so_waiting_off_the_cpu_does_not_count(descheduled_forward, worker):
    ex = executor(cpu_worker_thread=worker)
    handle = one_step(ex)
    ex.close()
    assert handle.device_end - handle.device_start >= SLOW
    assert handle.device_seconds < SLOW / 2
    assert "thread_time" in ex.timing_method() and torch.get_num_threads() == 1


def test_wall_clock_timing_counts_the_wait(descheduled_forward):
    ex = executor(cpu_clock="wall")
    handle = one_step(ex)
    assert handle.device_seconds == pytest.approx(handle.device_end - handle.device_start)
    assert handle.device_seconds >= SLOW and "wall clock" in ex.timing_method()


def test_executor_config_rejects_an_unknown_cpu_clock():
    with pytest.raises(ValueError, match="cpu_clock"):
        ExecutorConfig(cpu_clock="cycles")


def test_calibration_reports_device_time_with_the_host_share_beside_it(slow_packing):
    grid = CalibrationGrid(
        prefill_tokens=(0, 8), prefill_context=(0,), num_decodes=(0, 2), decode_context=(8,), repeats=1
    )
    table = measure_steps(executor(), grid)
    assert len(table) == 3
    assert (table.step_time_s < SLOW).all()
    assert (table.host_prepare_s >= SLOW).all()
    assert (table.host_enqueue_s == 0).all()  # a CPU queues nothing: its forward is the device work
