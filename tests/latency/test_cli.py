"""`schedsim latency` and `schedsim calibrate`, driven through an argparse parser we build here."""

import argparse
import json

import pandas as pd
import pytest
from schedsim.cli.latency import add_parsers
from schedsim.cli.listings import gpu_lines, model_lines
from schedsim.latency import make_latency_model


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="schedsim")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr()


def test_latency_prints_step_time_breakdown_and_kinds(capsys):
    code, out = run(
        [
            "latency",
            "--model",
            "llama-2-70b",
            "--gpu",
            "h100",
            "--tp",
            "8",
            "--prefill-tokens",
            "512",
            "--decode-batch",
            "16",
            "--decode-context",
            "900",
        ],
        capsys,
    )
    assert code == 0
    assert "(table model, engine vllm)" in out.out and "all_reduce" in out.out and "roofline" in out.out
    code, out = run(
        [
            "latency",
            "--model",
            "llama-2-70b",
            "--gpu",
            "h100",
            "--tp",
            "8",
            "--prefill-tokens",
            "512",
            "--decode-batch",
            "16",
            "--decode-context",
            "900",
            "--json",
        ],
        capsys,
    )
    data = json.loads(out.out)
    from schedsim.latency import StepShape

    expected = make_latency_model("llama-2-70b", "h100", 8).step_time(StepShape([(512, 0)], [(900, 0)] * 16))
    assert data["step_time_ms"] == pytest.approx(expected * 1e3)
    assert sum(data["breakdown_ms"].values()) == pytest.approx(data["step_time_ms"])


def test_latency_bad_input_exits_2(capsys):
    code, out = run(["latency", "--model", "gpt-9", "--decode-batch", "1"], capsys)
    assert code == 2 and out.err.startswith("schedsim latency: error: unknown model 'gpt-9'")  # unquoted
    code, out = run(["latency", "--decode-batch", "-1"], capsys)
    assert code == 2 and "--decode-batch" in out.err


def test_calibrate_profile_writes_fit_and_tables_used_by_table_model(tmp_path, capsys, vidur_tree):
    vidur_tree(tmp_path / "vidur")
    out = tmp_path / "cal" / "h100.json"
    code, printed = run(["calibrate", "--profile", str(tmp_path / "vidur"), "--out", str(out)], capsys)
    assert code == 0 and "mlp_up_proj" in printed.out
    cal = json.loads(out.read_text())
    assert cal["kind"] == "roofline-fit" and cal["profiles"] == "h100_profiles"
    model = make_latency_model("llama-2-7b", "h100", 2, calibration=str(out))
    assert model.name == "table" and str(tmp_path) in model.describe()["profile"]
    assert "calibration" in model.describe()["roofline"]["source"]


def test_calibrate_steps_csv(tmp_path, capsys):
    steps = tmp_path / "steps.csv"
    pd.DataFrame(
        {
            "step_time_ms": [5 + 0.01 * i + 0.02 * (i % 7) for i in range(30)],
            "prefill_tokens": [i * 10 for i in range(30)],
            "decode_count": [i % 7 for i in range(30)],
        }
    ).to_csv(steps, index=False)
    code, printed = run(["calibrate", "--steps", str(steps), "--out", str(tmp_path / "f.json")], capsys)
    assert code == 0 and "held-out" in printed.out
    assert json.loads((tmp_path / "f.json").read_text())["kind"] == "fitted-step"


def test_spec_listings():
    assert any(line.startswith("llama-3.1-70b") for line in model_lines())
    assert any(line.startswith("h200") for line in gpu_lines())


def test_latency_explain_splits_the_step_by_term(capsys):
    argv = [
        "latency",
        "--model",
        "llama-2-70b",
        "--gpu",
        "a100",
        "--tp",
        "8",
        "--decode-batch",
        "8",
        "--decode-context",
        "500",
        "--engine",
        "vllm-v0-eager",
        "--explain",
    ]
    code, out = run(argv, capsys)
    assert code == 0
    for term in (
        "compute",
        "memory",
        "kernel_fixed",
        "collectives",
        "sampler",
        "launch_floor",
        "schedule",
        "prepare_inputs",
        "synchronous step total",
    ):
        assert term in out.out
    code, out = run([*argv, "--json"], capsys)
    data = json.loads(out.out)
    ex = data["explain_ms"]
    assert sum(ex["gpu_step_ms"].values()) == pytest.approx(data["step_time_ms"])
    assert ex["gpu_step_ms"]["launch_floor"] > 0  # an eager 80-layer decode step is launch-bound
    assert ex["sync_step_ms"] == pytest.approx(data["step_time_ms"] + sum(ex["host_cpu_ms"].values()))
    code, out = run([*argv[:-3], "--engine", "none", "--explain"], capsys)
    assert code == 2 and "--explain needs" in out.err
