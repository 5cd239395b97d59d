"""A latency calibration applies only to the (model, GPU, TP) it was fitted for, unless forced;
`calibrate --cpu` says that it times schedsim's own policy code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedsim.cli.main import build_parser, main
from schedsim.latency import calibrate as calibrate_mod
from schedsim.latency.calibrate import calibrate_from_args
from schedsim.run.config import RunConfig
from schedsim.run.resolve import check_config, resolve_run
from schedsim.run.toml_config import ConfigError

pytestmark = pytest.mark.pure_python


def _fitted_step(tmp_path: Path, **meta: object) -> Path:
    """A fitted-step calibration as `schedsim calibrate --steps` writes it."""
    cal = {
        "kind": "fitted-step",
        **meta,
        "num_steps": 16,
        "coefficients": {
            "intercept_s": 0.005,
            "prefill_tokens": 1e-5,
            "decode_count": 2e-4,
            "sum_context": 0.0,
            "sum_context_sq": 0.0,
        },
    }
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    return path


def _small(**kw: object) -> RunConfig:
    return RunConfig(max_requests=4, num_gpu_blocks=2000, max_model_len=8192, latency_model="fitted", **kw)


def test_a_calibration_of_another_model_and_tp_is_refused(tmp_path: Path) -> None:
    cal = _fitted_step(tmp_path, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    resolve_run(_small(latency_calibration=str(cal)))  # its own deployment: accepted
    resolve_run(_small(latency_calibration=str(cal), gpu="h100"))  # an alias of the same GPU
    with pytest.raises(ValueError) as err:
        resolve_run(_small(latency_calibration=str(cal), model="llama-3.1-70b", tp=4))
    msg = str(err.value)
    assert "fitted for model 'llama-3.1-8b' (this run: 'llama-3.1-70b')" in msg
    assert "fitted for tp 1 (this run: 4)" in msg and "--force-calibration" in msg
    with pytest.raises(ConfigError, match="gpu 'h100-sxm'"):
        check_config(_small(latency_calibration=str(cal), gpu="a100-80gb"))


def test_a_calibration_that_does_not_say_what_it_fitted_is_refused(tmp_path: Path) -> None:
    cal = _fitted_step(tmp_path, model=None, gpu=None, tp=None)
    with pytest.raises(ValueError, match="does not record its model"):
        resolve_run(_small(latency_calibration=str(cal)))


def test_a_roofline_fit_holds_for_its_gpus_only(tmp_path: Path) -> None:
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"kind": "roofline-fit", "gpus": {"a100-80gb": {"config": {}}}}))
    kw = {"max_model_len": 8192, "latency_calibration": str(path)}
    resolve_run(RunConfig(gpu="a100-80gb", model="llama-3.1-70b", tp=2, **kw))
    with pytest.raises(ValueError, match=r"gpu \['a100-80gb'\] \(this run: 'h100-sxm'\)"):
        resolve_run(RunConfig(**kw))


def test_forcing_runs_and_config_json_records_the_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cal = _fitted_step(tmp_path, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    argv = ["run", "--latency-model", "fitted", "--latency-calibration", str(cal), "--tp", "2"]
    argv += ["--max-requests", "4", "--num-gpu-blocks", "2000", "--max-model-len", "8192"]
    argv += ["--no-progress", "--no-plots"]
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force-calibration" in err and not out.exists()
    assert main([*argv, "--out", str(out), "--force-calibration"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["force_calibration"] is True
    match = config["latency_calibration_match"]
    assert match["forced"] is True and match["mismatch"] == ["tp"]
    assert match["fitted_for"]["tp"] == 1 and match["run"]["tp"] == 2


def test_calibrate_cpu_says_it_times_schedsims_own_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "not an engine's host overhead" in " ".join(capsys.readouterr().out.split())
    real = calibrate_mod.calibrate_cpu_costs
    monkeypatch.setattr(
        calibrate_mod, "calibrate_cpu_costs", lambda policy: real(policy, batches=(1, 4), steps=8)
    )
    args = build_parser().parse_args(["calibrate", "--cpu", "--out", str(tmp_path / "cpu.json")])
    path, summary = calibrate_from_args(args)
    data = json.loads(Path(path).read_text())
    assert "schedsim's own 'vllm' policy code" in data["measures"] and "not an engine's" in data["measures"]
    assert "not an engine's host overhead" in summary
    run = resolve_run(RunConfig(cpu_cost_file=str(path), max_model_len=8192))
    assert "not an engine's host overhead" in run.describe()["cpu_model_description"]["source"]


def test_the_latency_what_if_checks_the_calibration_too(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cal = _fitted_step(tmp_path, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    argv = ["latency", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--decode-batch", "4"]
    assert main([*argv, "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "gpu 'h100-sxm' (this run: 'a100-80gb')" in err
        and "--force-calibration" in err
    )
    assert main([*argv, "--calibration", str(cal), "--force-calibration"]) == 0
