"""The engine loop's wait protocol, driven by hand (no SimPy): pins the order of waits."""

from __future__ import annotations

import pytest
from schedsim import RunConfig, simulate
from schedsim.engine.loop import Engine, PolicyStuckError
from schedsim.engine.waits import CpuPhase, Inputs, Launch, PollInputs, Sample, WaitArrival, WaitStep
from schedsim.policies import Request, StepPlan, make_policy
from schedsim.worlds.executor import SimExecutor
from schedsim.worlds.oracle import WorkloadOracle
from schedsim.worlds.simpy_world import SimWorld


class ConstLatency:
    """One millisecond per step."""

    name = "const"

    def step_time(self, shape) -> float:
        return 1e-3

    def describe(self) -> dict:
        return {"name": self.name}


def drive(
    engine: Engine,
    requests: list[Request],
    targets: dict[str, int],
    aborts_at_update: dict[int, list[str]] | None = None,
) -> list[tuple]:
    """Resolve waits immediately; all requests arrive at the first WaitArrival. Returns the log."""
    oracle = WorkloadOracle(seed=1)
    for rid, t in targets.items():
        oracle.add(rid, t)
    ex = SimExecutor(oracle, ConstLatency())
    log: list[tuple] = []
    pending = list(requests)
    gen = engine.run()
    value = None
    updates = 0
    while True:
        try:
            w = gen.send(value)
        except StopIteration:
            return log
        value = None
        assert len(log) < 100_000, "the engine loop spins without end"
        if isinstance(w, CpuPhase):
            log.append((w.kind, w.step))
            if w.kind == "update_from_output":
                updates += 1
        elif isinstance(w, Launch):
            value = ex.launch(w.plan, w.requests, w.step, w.defer_sampling)
            log.append(("launch", w.step, w.defer_sampling))
        elif isinstance(w, WaitStep):
            value = ex.collect(w.handle)
            log.append(("wait", w.handle.step))
        elif isinstance(w, Sample):
            log.append(("sample", w.handle.step))
        elif isinstance(w, PollInputs):
            ids = (aborts_at_update or {}).pop(updates, []) if w.aborts_only else []
            value = Inputs(abort_ids=ids)
        elif isinstance(w, WaitArrival):
            value = Inputs(requests=pending) if pending else None
            pending = []
            log.append(("wait_arrival",))


def _policy(name: str, **kw):
    return make_policy(
        name, num_gpu_blocks=200, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512, **kw
    )


def test_sync_step_blocks_on_each_step_before_scheduling_the_next():
    eng = Engine(_policy("vllm"))
    log = drive(eng, [Request("a", 0.0, 10, 3)], {"a": 10})
    kinds = [e[0] for e in log]
    assert kinds[:8] == [
        "wait_arrival",
        "schedule",
        "prepare_inputs",
        "launch",
        "wait",
        "d2h_copy",
        "update_from_output",
        "schedule",
    ]
    # prefill samples 1, two decodes reach max_tokens=3, then one empty step carries the
    # finished id to the executor (has_requests() stays true until it is reported)
    assert [e[1] for e in log if e[0] == "wait"] == [0, 1, 2, 3]
    assert kinds[-1] == "wait_arrival"


def test_batch_queue_schedules_next_step_before_waiting_on_previous():
    eng = Engine(_policy("vllm-async"))
    assert eng.depth == 2
    log = drive(eng, [Request("a", 0.0, 10, 4)], {"a": 10})
    seq = [(e[0], e[1]) for e in log if e[0] in ("launch", "wait")]
    # step 1 is launched before step 0 is waited on; then one launch per wait
    assert seq[:4] == [("launch", 0), ("launch", 1), ("wait", 0), ("launch", 2)]
    waits = [e[1] for e in log if e[0] == "wait"]
    assert waits == sorted(waits) and len(set(waits)) == len(waits)


def test_deferred_sampling_waits_for_previous_output_then_samples():
    eng = Engine(_policy("vllm-async"))
    req = Request("s", 0.0, 10, 5, structured_output=True)
    log = drive(eng, [req], {"s": 10})
    deferred = [e for e in log if e[0] == "launch" and e[2]]
    assert deferred, "a structured-output decode with a token in flight must defer sampling"
    for d in deferred:
        i = log.index(d)
        after = log[i + 1 :]
        # the previous step is waited on and updated before the deferred step is released
        sample_at = after.index(("sample", d[1]))
        assert any(e[0] == "update_from_output" and e[1] < d[1] for e in after[:sample_at])
    assert req.num_output_tokens == 5


def test_abort_during_step_is_applied_before_update():
    eng = Engine(_policy("vllm-async"))
    a, b = Request("a", 0.0, 10, 50), Request("b", 0.0, 10, 50)
    drive(eng, [a, b], {"a": 100, "b": 100}, aborts_at_update={2: ["a"]})
    assert a.status.name == "FINISHED_ABORTED"
    assert b.num_output_tokens == 50 and b.is_finished


class NeverSchedules:
    """A policy that accepts requests and never schedules them."""

    max_concurrent_batches = 1

    def __init__(self) -> None:
        self.reqs: list[Request] = []

    def add_request(self, request: Request) -> None:
        self.reqs.append(request)

    def abort_requests(self, ids):
        return []

    def has_requests(self) -> bool:
        return bool(self.reqs)

    def schedule(self) -> StepPlan:
        return StepPlan.make_empty()

    def update_from_output(self, plan, result):
        return []

    def get_request_counts(self):
        return 0, len(self.reqs)


@pytest.mark.parametrize("depth", [1, 2])
def test_stuck_policy_raises_instead_of_spinning(depth: int) -> None:
    """Also with a batch queue, whose empty steps in flight must not count as progress."""
    eng = Engine(NeverSchedules(), batch_queue_depth=depth)
    with pytest.raises(PolicyStuckError, match="big"):
        drive(eng, [Request("big", 0.0, 200, 2)], {"big": 2})


def test_another_simpy_process_runs_on_time_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine process leaves SimPy's clock behind only while nothing else is scheduled: a
    second process wakes at its own times, and the tables are those of a run without it."""
    ticks: list[float] = []
    engine_at: list[float] = []  # the engine thread's clock when the other process wakes
    ends: list[tuple[float, float]] = []
    real_run = SimWorld.run

    def run(self: SimWorld) -> None:
        def ticker():  # noqa: ANN202
            while len(ticks) < 40:
                yield self.env.timeout(0.25)
                ticks.append(self.env.now)
                engine_at.append(self.cpu_now)

        self.env.process(ticker())
        real_run(self)
        ends.append((self.env.now, self.cpu_now))

    cfg = RunConfig(policy="vllm-async", max_requests=120, rate=8.0)
    plain = simulate(cfg)
    monkeypatch.setattr(SimWorld, "run", run)
    ticked = simulate(cfg)
    for name in ("requests", "steps", "timeline"):
        assert getattr(plain, name).equals(getattr(ticked, name)), name
    assert ticks == pytest.approx([0.25 * (i + 1) for i in range(40)])
    # the engine yielded before each wake-up; it may be past it by what it ran without waiting (CPU
    # phases, a fast-forward jump), or behind it while it waits for a step or an arrival
    assert all(abs(c - t) < 2.0 for t, c in zip(ticks, engine_at, strict=True))
    env_now, cpu_now = ends[0]
    assert env_now == cpu_now  # SimPy's clock caught up with the engine thread at the end
