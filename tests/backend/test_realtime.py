"""The real-time world: the simulator's engine loop driving the real backend in wall-clock time."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")

from schedsim.metrics.recorder import output_hash  # noqa: E402
from schedsim.policies import Request  # noqa: E402
from schedsim.run.config import RunConfig  # noqa: E402
from schedsim.run.real import run_real  # noqa: E402
from schedsim.worlds.realtime import synthesize_prompt  # noqa: E402


def workload(n: int = 10) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_time": [5.0 + 0.01 * i for i in range(n)],
            "prompt_tokens": [9 + 5 * i for i in range(n)],
            "output_tokens": [4 + i % 3 for i in range(n)],
        }
    )


def config(policy: str, **kw) -> RunConfig:
    return RunConfig(policy=policy, block_size=4, num_gpu_blocks=128, max_num_seqs=4, max_model_len=128, **kw)


@pytest.mark.parametrize(
    "policy,kw", [("vllm", {"max_num_batched_tokens": 32}), ("vllm-async", {"max_num_batched_tokens": 16})]
)
def test_real_run_fills_the_simulator_tables(policy, kw):
    result = run_real(config(policy, **kw), workload(), {"model": "tiny", "seed": 2}, warmup=False)
    req, steps, tl = result.requests, result.steps, result.timeline
    assert (req.finish_reason == "length").all() and (req.num_output_tokens == req.max_tokens).all()
    assert req.max_tokens.tolist() == [4 + i % 3 for i in range(10)]  # the trace's output lengths
    assert req.arrival_time.iloc[0] == 0.0  # replay starts at the first arrival
    assert (req.first_token_time >= req.arrival_time).all() and (req.ttft > 0).all()
    ran = steps[steps.num_prefill_tokens + steps.num_decode_tokens > 0]
    assert (ran.end >= ran.start).all() and (ran.gpu_time > 0).all()
    assert set(tl.kind) >= {"schedule", "prepare_inputs", "update_from_output", "forward"}
    device, dtype = ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float32")
    described = result.summary["backend_description"]
    assert result.summary["backend"] == "real" and f"model on {device}" in described and dtype in described


def test_sync_and_async_engines_produce_identical_tokens():
    hashes = []
    for policy, chunk in (("vllm", 64), ("vllm-async", 8), ("vllm-async", 64)):
        result = run_real(
            config(policy, max_num_batched_tokens=chunk),
            workload(),
            {
                "model": "tiny",
                "seed": 2,
                "dtype": "fp32",  # bf16 on CUDA could round apart
                "cpu_worker_thread": policy == "vllm-async",
            },
            warmup=policy == "vllm",
        )
        hashes.append(result.requests.output_hash.tolist())
    assert hashes[0] == hashes[1] == hashes[2]
    assert len(set(hashes[0])) > 1  # the requests really differ


def test_synthesized_prompts_share_tokens_where_the_trace_shares_hashes():
    a = Request("a", 0.0, 10, 2, prompt_block_hashes=(11, 22))
    b = Request("b", 0.0, 9, 2, prompt_block_hashes=(11, 33))
    ta, tb = synthesize_prompt(a, 4, 512, 0), synthesize_prompt(b, 4, 512, 0)
    assert len(ta) == 10 and len(tb) == 9 and all(3 <= t < 512 for t in ta + tb)
    assert ta[:4] == tb[:4] and ta[4:8] != tb[4:8]
    assert output_hash(ta) == output_hash(synthesize_prompt(a, 4, 512, 0))  # deterministic


def test_validate_compares_the_real_run_with_the_simulator_fitted_to_it(tmp_path):
    from schedsim.backend.calibrate import CalibrationGrid
    from schedsim.experiments.validate import validate

    grid = CalibrationGrid(
        prefill_tokens=(0, 8, 32),
        prefill_context=(0, 16),
        num_decodes=(0, 1, 4),
        decode_context=(8, 32),
        repeats=1,
    )
    report = validate(
        config("vllm-async", max_num_batched_tokens=16), workload(6), {"model": "tiny"}, grid, repeats=2
    )
    s = report.summary
    assert s["num_requests"] == 6 and s["same_output_lengths"]
    assert s["num_steps"] == len(report.steps) == len(report.real.extra["step_shapes"]) > 6
    assert (report.steps.predicted_s > 0).all() and (report.steps.measured_s > 0).all()
    assert (report.steps.in_run_s > 0).all() and (report.steps.repeat_gap >= 0).all()
    for key in ("step", "step_in_run", "ttft", "tpot"):
        assert 0 <= s[f"{key}_median_rel_err"] <= s[f"{key}_p90_rel_err"]
    # The simulated twin ran the same requests to the same lengths on the fitted GPU model.
    assert report.sim.config["backend_description"].startswith("simulated, GPU model fitted to")
    assert report.calibration["kind"] == "fitted-step"
    assert report.calibration["num_steps"] == len(grid.shapes()) == len(report.grid_steps)
    assert report.plot(tmp_path / "validate.png").stat().st_size > 10_000


def test_validate_states_its_timing_method_and_whether_its_measurements_can_judge():
    from schedsim.experiments.validate import NOISE_LIMIT, validate

    report = validate(
        config("vllm", max_num_batched_tokens=32), workload(4), {"model": "tiny", "seed": 1}, repeats=2
    )
    s = report.summary
    assert np.isfinite(s["step_median_rel_err"]) and np.isfinite(s["measurement_noise_rel"])
    assert s["measurements_too_noisy"] == (s["measurement_noise_rel"] > NOISE_LIMIT)
    assert ("too noisy to judge" in s["noise_verdict"]) == s["measurements_too_noisy"]
    assert f"{s['measurement_noise_rel']:.1%}" in s["noise_verdict"]
    if not torch.cuda.is_available():
        assert "time.thread_time" in s["step_timing"] and "1 torch intra-op thread" in s["step_timing"]
    assert "minimum over 2 interleaved repeats" in s["step_timing"]
    assert s["workload"] == "real-backend workload: 4 requests of the given workload"
    # the covering grid spans every step the run took: nothing extrapolated
    assert s["steps_beyond_grid"] == 0 and s["calibration_shapes"] == len(report.grid_steps)


def test_a_step_beyond_the_grid_is_counted_and_warned_about():
    from schedsim.backend.calibrate import CalibrationGrid
    from schedsim.experiments.validate import validate

    small = CalibrationGrid(
        prefill_tokens=(0, 2, 4), prefill_context=(0,), num_decodes=(0, 1), decode_context=(4, 8), repeats=1
    )
    with pytest.warns(UserWarning, match="beyond the calibration grid"):
        report = validate(
            config("vllm", max_num_batched_tokens=32), workload(3), {"model": "tiny"}, small, repeats=1
        )
    assert report.summary["steps_beyond_grid"] > 0
    assert report.summary["measurements_too_noisy"] and "not judged" in report.summary["noise_verdict"]


def test_backend_flags_become_executor_options():
    import argparse

    from schedsim.backend import ExecutorConfig
    from schedsim.cli.backend import add_backend_arguments, backend_options

    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)
    args = parser.parse_args(["--backend", "real", "--real-model", "mini", "--real-ops", "torch"])
    assert args.backend == "real"
    cfg = ExecutorConfig(**backend_options(args))
    assert (cfg.model, cfg.ops, cfg.device, cfg.cpu_worker_thread) == ("mini", "torch", "auto", False)
    assert cfg.dtype is None  # the device decides: bf16 on CUDA, fp32 on a CPU
    assert parser.parse_args([]).backend == "sim"
