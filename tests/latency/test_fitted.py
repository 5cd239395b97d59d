"""Fitted whole-step model: recovers known coefficients, validates CSVs, loads via make_latency_model."""

import json
import random

import numpy as np
import pandas as pd
import pytest
from schedsim.latency import StepShape, make_latency_model
from schedsim.latency.fitted import (
    FEATURES,
    fit_step_model,
    nonnegative_lstsq,
    read_step_csv,
    step_features,
    steps_frame,
)

TRUE = {
    "intercept_s": 4e-3,
    "prefill_tokens": 6e-5,
    "decode_count": 3e-5,
    "sum_context": 1e-7,
    "sum_context_sq": 2e-9,
}


def random_shapes(n: int, seed: int = 0) -> list[StepShape]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pre = [(rng.randint(1, 2048), rng.choice([0, 256, 1024])) for _ in range(rng.randint(0, 2))]
        dec = [(rng.randint(1, 4000), rng.choice([0, 0, 2])) for _ in range(rng.randint(0, 96))]
        if pre or dec:
            out.append(StepShape(pre, dec))
    return out


def truth(shape: StepShape) -> float:
    f = step_features(shape)
    return TRUE["intercept_s"] + sum(TRUE[k] * v for k, v in zip(FEATURES, f, strict=True))


def test_features_count_drafts_and_quadratic_prefill_attention():
    assert step_features(StepShape([(10, 5)], [(7, 2), (3, 0)])) == (10, 4, 15 + 10 + 4, 225 - 25)


def test_fit_recovers_exact_linear_truth():
    shapes = random_shapes(200)
    cal = fit_step_model(steps_frame(shapes, [truth(s) for s in shapes]))
    for key, value in TRUE.items():
        assert cal["coefficients"][key] == pytest.approx(value, rel=1e-6)
    assert cal["cv_error"]["p90_rel_err"] < 1e-6
    model = make_latency_model("llama-3.1-8b", "h100", kind="roofline")  # unrelated: type check
    assert model.name == "roofline"


def test_nonnegative_lstsq_clips_a_negative_direction():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    x = nonnegative_lstsq(a, np.array([1.0, -1.0, 0.0]))
    assert (x >= 0).all() and x[1] == 0.0


def test_fitted_model_tracks_the_table_model_it_was_fitted_to():
    table = make_latency_model("llama-3-8b", "a100-80gb", 1)
    shapes = random_shapes(300, seed=1)
    times = [table.step_time(s) for s in shapes]
    cal = fit_step_model(steps_frame(shapes, times))
    assert cal["cv_error"]["median_rel_err"] < 0.05


def test_step_csv_validation_names_line_and_field(tmp_path):
    path = tmp_path / "steps.csv"
    pd.DataFrame({"step_time_ms": [5.0, 6.0], "prefill_tokens": [10, -1], "decode_count": [1, 2]}).to_csv(
        path, index=False
    )
    with pytest.raises(ValueError, match=r"steps.csv:3: field 'prefill_tokens'"):
        read_step_csv(path)
    pd.DataFrame({"prefill_tokens": [1]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="step_time_s"):
        read_step_csv(path)


def test_make_latency_model_fitted_from_calibration_file(tmp_path):
    shapes = random_shapes(60, seed=2)
    cal = fit_step_model(steps_frame(shapes, [truth(s) for s in shapes]), model="llama-3.1-8b")
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(cal))
    model = make_latency_model("llama-3.1-8b", "h100", kind="fitted", calibration=str(path))
    shape = StepShape([(100, 0)], [(50, 0)] * 4)
    assert model.step_time(shape) == pytest.approx(truth(shape), rel=1e-6)
    assert model.step_time(StepShape()) == 0.0
    assert model.describe()["path"] == str(path)
    assert make_latency_model("llama-3.1-8b", "h100", calibration=str(path)).name == "fitted"
    with pytest.raises(ValueError, match="needs calibration"):
        make_latency_model("llama-3.1-8b", "h100", kind="fitted")
