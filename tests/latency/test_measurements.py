"""Measured latencies: shipped sources, the user's formats, the fit, `calibrate --measurements`."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest
from schedsim import RunConfig
from schedsim.cli.latency import add_parsers
from schedsim.latency import make_cpu_cost_model, make_latency_model
from schedsim.latency.calibrate_overhead import calibrate_measurements
from schedsim.latency.crossval import all_params, evaluation_rows
from schedsim.latency.engines import get_engine_profile, shipped_overhead_fit
from schedsim.latency.measurements import (
    SOURCES,
    kv_fits,
    prefill_groups,
    read_measurements,
    row_steps,
    shipped_sources,
)
from schedsim.latency.overhead_fit import family_of, params_from_fit, predict_rows, step_table
from schedsim.run.resolve import resolve_run


def test_shipped_sources_have_provenance_engine_and_usable_rows():
    df = shipped_sources()
    assert set(df.source) == set(SOURCES)
    assert set(df.engine_profile) <= {
        "vllm-v0-eager",
        "vllm-v0-graph",
        "vllm-v0-multistep",
        "trtllm-python",
        "trtllm-cpp",
    }
    assert (df.value > 0).all() and set(df.metric) <= {"ttft", "tpot", "e2e"}
    assert {8} <= set(df[df.source == "lambda"].tp) and {1, 2, 4, 8} <= set(df.tp)
    rows = evaluation_rows(df)
    assert len(rows) < len(df)  # static batches whose KV cache would overflow are left out
    assert all(kv_fits(r) for r in rows.itertuples(index=False))


def _row(**kw):
    base = dict(
        source="x",
        model="llama-2-7b",
        gpu="h100-sxm",
        tp=1,
        engine_profile="vllm-v0-graph",
        metric="e2e",
        batch=4,
        input_len=100,
        output_len=11,
        value=1.0,
        max_num_batched_tokens=np.nan,
        num_prefills=np.nan,
        prefill_tokens=np.nan,
        prefill_context=np.nan,
        decode_batch=np.nan,
        decode_context=np.nan,
    )
    base.update(kw)
    return pd.DataFrame([base]).itertuples(index=False).__next__()


def test_a_static_batch_is_one_prefill_then_output_minus_one_decodes():
    steps = row_steps(_row())
    prefill, decodes = steps[0], steps[1:]
    assert prefill.shape.prefills == [(100, 0)] * 4 and prefill.weight == 1.0
    assert sum(s.weight for s in decodes) == pytest.approx(10)  # output_len - 1 decode steps
    assert decodes[0].shape.decodes == [(100, 0)] * 4 and decodes[-1].shape.decodes == [(109, 0)] * 4
    tpot = row_steps(_row(metric="tpot"))
    assert sum(s.weight for s in tpot) == pytest.approx(1.0)  # the mean decode step
    # vLLM V0 without chunked prefill: whole prompts up to max(max_model_len, 2048) tokens a step
    assert prefill_groups(_row(source="argonne", batch=64, input_len=1024)) == [4] * 16
    assert prefill_groups(_row(batch=5, input_len=1000, max_num_batched_tokens=2048)) == [2, 2, 1]


def test_read_step_csv_static_batch_csv_and_vllm_json(tmp_path):
    steps = tmp_path / "steps.csv"
    steps.write_text("step_time_ms,prefill_tokens,decode_batch,decode_context\n12.5,512,8,300\n9,0,32,800\n")
    df = read_measurements(steps, "llama-3.1-8b", "h100", 1, "vllm")
    assert list(df.metric) == ["step", "step"] and df.value.tolist() == [12.5, 9.0]
    shape = row_steps(next(df.itertuples(index=False)))[0].shape
    assert shape.prefills == [(512, 0)] and shape.decodes == [(300, 0)] * 8
    static = tmp_path / "latency.csv"
    static.write_text("batch_size,input_len,output_len,latency_ms,ttft_ms\n8,32,128,1579.3,40\n")
    df = read_measurements(static, "llama-3.1-8b", "a100", 1, "vllm")
    assert sorted(df.metric) == ["e2e", "ttft"] and df.gpu.iloc[0] == "a100-80gb"
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"avg_latency": 1.5, "latencies": [1.5], "percentiles": {}}))
    with pytest.raises(ValueError, match="--batch-size"):
        read_measurements(bench, "llama-3.1-8b", "h100", 1, "vllm")
    df = read_measurements(bench, "llama-3.1-8b", "h100", 1, "vllm", 8, 32, 128)
    assert df.value.iloc[0] == 1500.0 and df.batch.iloc[0] == 8
    serving = tmp_path / "serve.json"
    payload = {
        "max_concurrency": 1,
        "input_lens": [10, 20],
        "output_lens": [3, 1],
        "itls": [[0.01, 0.012], []],
        "ttfts": [0.02, 0.03],
    }
    serving.write_text(json.dumps(payload))
    df = read_measurements(serving, "llama-3.1-8b", "h100", 1, "vllm")
    assert df.metric.tolist() == ["tpot"] and df.value.iloc[0] == pytest.approx(11.0)
    serving.write_text(json.dumps({**payload, "max_concurrency": 16}))
    with pytest.raises(ValueError, match="max-concurrency 1"):
        read_measurements(serving, "llama-3.1-8b", "h100", 1, "vllm")


def test_bad_measurement_files_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step_time_ms,decode_batch\n5,4\n-1,4\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: field 'step_time_ms'"):
        read_measurements(bad, "llama-2-7b", "h100", 1, "vllm")
    bad.write_text("batch_size,input_len,output_len\n1,2,3\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: no measured value"):
        read_measurements(bad, "llama-2-7b", "h100", 1, "vllm")
    with pytest.raises(ValueError, match="unknown engine"):
        read_measurements(bad, "llama-2-7b", "h100", 1, "sglang-2077")


def test_fit_predictor_is_the_runtime_model_plus_the_cpu_phases():
    df = evaluation_rows().groupby(["source", "tp"]).head(2).reset_index(drop=True)
    t = step_table(df)
    classes = sorted({get_engine_profile(e).fitted_as for e in df.engine_profile})
    params = params_from_fit(shipped_overhead_fit(), classes, tuple(sorted({family_of(g) for g in df.gpu})))
    pred = predict_rows(np.array([p.mean for p in params]), [p.name for p in params], t, len(df))
    for r, expected in zip(df.itertuples(index=False), pred, strict=True):
        lm = make_latency_model(r.model, r.gpu, int(r.tp), engine=r.engine_profile)
        cpu = make_cpu_cost_model(r.gpu, int(r.tp), engine=r.engine_profile)
        n = get_engine_profile(r.engine_profile).num_scheduler_steps
        runtime = sum(
            s.weight * (lm.step_time(s.shape) + cpu.step_total(s.reqs, s.tokens) / n) for s in row_steps(r)
        )
        assert runtime == pytest.approx(expected, rel=1e-9)


def _synthetic_deployment(tmp_path, step_us=600.0, per_request_us=40.0, kernel_scale=1.15):
    """Step times produced by known overhead terms (a synchronous vLLM at TP 2 on H100)."""
    rows = []
    for nd, ctx in ((1, 100), (8, 500), (32, 900), (64, 1500), (128, 300), (16, 3000)):
        rows.append({"prefill_tokens": 0, "decode_batch": nd, "decode_context": ctx})
    for n in (128, 512, 1024, 2048):
        rows.append({"prefill_tokens": n, "decode_batch": 4, "decode_context": 700})
    df = pd.DataFrame(rows)
    df["step_time_ms"] = 1.0
    path = tmp_path / "steps.csv"
    df.to_csv(path, index=False)
    meas = read_measurements(path, "llama-3.1-8b", "h100", 2, "vllm")
    t = step_table(meas)
    params = all_params(meas)
    names = [p.name for p in params]
    theta = np.array([p.mean for p in params])
    truth = {"kernel_scale:h100": kernel_scale, "step:vllm": step_us, "req:vllm": per_request_us}
    for k, v in truth.items():
        theta[names.index(k)] = v
    df["step_time_ms"] = predict_rows(theta, names, t, len(meas)) * 1e3
    df.to_csv(path, index=False)
    return path, truth


def test_calibration_recovers_known_terms_and_reports_held_out_error(tmp_path):
    path, truth = _synthetic_deployment(tmp_path)
    df = read_measurements(path, "llama-3.1-8b", "h100", 2, "vllm")
    cal = calibrate_measurements(df, "llama-3.1-8b", "h100", 2, "vllm")
    assert cal["kind"] == "overhead-fit" and (cal["model"], cal["gpu"], cal["tp"]) == (
        "llama-3.1-8b",
        "h100-sxm",
        2,
    )
    assert cal["error_before"]["median_abs"] > 0.03
    assert cal["fit_error"]["median_abs"] < 0.01 and cal["cv_error"]["median_abs"] < 0.02
    assert cal["gpus"]["h100-sxm"]["kernel_scale"] == pytest.approx(truth["kernel_scale:h100"], rel=0.03)
    assert cal["engines"]["vllm"]["per_request_us"] == pytest.approx(truth["req:vllm"], rel=0.15)


def test_calibrate_cli_file_drives_latency_and_runs(tmp_path, capsys):
    path, truth = _synthetic_deployment(tmp_path)
    out = tmp_path / "cal.json"
    parser = argparse.ArgumentParser(prog="schedsim")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "calibrate",
            "--measurements",
            str(path),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--tp",
            "2",
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "held-out" in printed and "error before" in printed
    lm = make_latency_model("llama-3.1-8b", "h100", 2, calibration=str(out))
    assert lm.terms.kernel_scale == pytest.approx(truth["kernel_scale:h100"], rel=0.03)
    run = resolve_run(RunConfig(model="llama-3.1-8b", gpu="h100", tp=2, latency_calibration=str(out)))
    assert run.latency_model.terms.kernel_scale == lm.terms.kernel_scale
    # the CPU phases come from the calibration: per request ~40 us per step in all
    per_req = sum(
        run.cpu_model.phase_time(k, 11, 0) - run.cpu_model.phase_time(k, 10, 0)
        for k in ("schedule", "prepare_inputs", "d2h_copy", "update_from_output")
    )
    assert per_req == pytest.approx(truth["req:vllm"] * 1e-6, rel=0.15)
    args = parser.parse_args(["calibrate", "--measurements", str(path), "--out", str(out)])
    assert args.func(args) == 2 and "--model" in capsys.readouterr().err
