"""Generators reproduce with a seed and hit their target rate, CV, phases and length moments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import schedsim.traces as T


def gaps(spec: T.ArrivalSpec, n: int, seed: int = 0) -> np.ndarray:
    return np.diff(T.arrival_times(spec, np.random.default_rng(seed), n=n))


def test_same_seed_same_workload_other_seed_differs() -> None:
    spec = T.WorkloadSpec(
        arrival=T.ArrivalSpec("gamma", rate=4, cv=2),
        classes=[
            T.ClassSpec(
                "chat",
                2,
                turns=T.LengthSpec("uniform", low=1, high=4),
                think_time_s=5,
                system_prompt_tokens=64,
            ),
            T.ClassSpec("doc", 1),
        ],
        num_requests=300,
        seed=11,
    )
    a, b = T.generate_workload(spec), T.generate_workload(spec)
    pd.testing.assert_frame_equal(a, b)
    spec.seed = 12
    c = T.generate_workload(spec)
    assert not np.array_equal(a["arrival_time"], c["arrival_time"])


@pytest.mark.parametrize("process,cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_rate_and_cv_over_a_long_run(process: str, cv: float) -> None:
    n = 200_000
    g = gaps(T.ArrivalSpec(process, rate=25.0, cv=cv), n)
    # standard errors: rate ~ cv/sqrt(n) relative (0.7% at cv=3); CV estimate a few times that
    assert (n - 1) / g.sum() == pytest.approx(25.0, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.05)


def test_on_off_phases_hold_their_rates() -> None:
    spec = T.ArrivalSpec(rate=40.0, on_s=10.0, off_s=30.0, off_rate=2.0)
    t = T.arrival_times(spec, np.random.default_rng(1), duration=4000.0)
    on = (t % 40.0) < 10.0
    assert on.sum() / (100 * 10.0) == pytest.approx(40.0, rel=0.03)
    assert (~on).sum() / (100 * 30.0) == pytest.approx(2.0, rel=0.08)
    assert t.max() < 4000.0


def test_bursts_multiply_the_rate_in_their_window() -> None:
    spec = T.ArrivalSpec(rate=10.0, bursts=[(100.0, 50.0, 5.0)])
    t = T.arrival_times(spec, np.random.default_rng(2), duration=400.0)
    inside = ((t >= 100) & (t < 150)).sum() / 50.0
    outside = ((t < 100) | (t >= 150)).sum() / 350.0
    assert inside == pytest.approx(50.0, rel=0.1) and outside == pytest.approx(10.0, rel=0.1)


def test_length_distributions() -> None:
    rng = np.random.default_rng(3)
    ln = T.LengthSpec("lognormal", mean=800, cv=1.5).sample(200_000, rng)
    assert ln.mean() == pytest.approx(800, rel=0.03)
    assert ln.std() / ln.mean() == pytest.approx(1.5, rel=0.1)
    un = T.LengthSpec("uniform", low=10, high=20).sample(50_000, rng)
    assert un.min() == 10 and un.max() == 20 and un.mean() == pytest.approx(15, rel=0.01)
    assert set(T.LengthSpec("fixed", value=7).sample(10, rng)) == {7}
    clipped = T.LengthSpec("lognormal", mean=100, cv=3, max=150).sample(10_000, rng)
    assert clipped.max() == 150 and clipped.min() >= 1


def test_empirical_resampling_from_a_trace() -> None:
    spec = T.LengthSpec("empirical", trace="azure-code-2023", column="output_tokens")
    pool = set(T.load_workload("azure-code-2023")["output_tokens"])
    draw = spec.sample(5000, np.random.default_rng(4))
    assert set(draw) <= pool and len(set(draw)) > 50


def test_class_mix_flags_and_proportions() -> None:
    classes = [
        T.ClassSpec("chat", 3),
        T.ClassSpec("doc", 1, prompt=T.LengthSpec("fixed", value=8000)),
        T.ClassSpec("json", 1, structured_output=True, priority=2, lora_id=7, max_tokens=64),
    ]
    df = T.generate_workload(T.WorkloadSpec(classes=classes, num_requests=20_000, seed=1))
    share = df["request_class"].value_counts(normalize=True)
    assert share["chat"] == pytest.approx(0.6, abs=0.02)
    assert share["doc"] == pytest.approx(0.2, abs=0.02)
    js = df[df["request_class"] == "json"]
    assert js["structured_output"].all() and (js["priority"] == 2).all()
    assert (js["lora_id"] == 7).all() and (js["max_tokens"] == 64).all()
    other = df[df["request_class"] != "json"]
    assert not other["structured_output"].any() and other["lora_id"].isna().all()
    assert (df.loc[df["request_class"] == "doc", "prompt_tokens"] == 8000).all()
    assert "prompt_block_hashes" not in df.columns and "session_id" not in df.columns


def test_request_count_duration_and_rate_of_generated_workload() -> None:
    df = T.generate_workload(T.WorkloadSpec(arrival=T.ArrivalSpec(rate=50), num_requests=5000))
    assert len(df) == 5000 and df["arrival_time"].iloc[0] == 0.0
    assert T.mean_rate(df) == pytest.approx(50, rel=0.05)
    dur = T.generate_workload(
        T.WorkloadSpec(arrival=T.ArrivalSpec(rate=20), num_requests=None, duration_s=100.0, seed=2)
    )
    assert len(dur) == pytest.approx(2000, rel=0.1) and dur["arrival_time"].max() < 100.0


def test_sessions_think_time_and_turn_counts() -> None:
    chat = T.ClassSpec("chat", turns=T.LengthSpec("fixed", value=3), think_time_s=10.0)
    df = T.generate_workload(
        T.WorkloadSpec(arrival=T.ArrivalSpec(rate=1), classes=[chat], num_requests=3000, seed=3)
    )
    g = df.sort_values(["session_id", "turn"]).groupby("session_id")["arrival_time"]
    think = g.diff().dropna()
    assert think.mean() == pytest.approx(10.0, rel=0.1)
    full = df.groupby("session_id")["turn"].max()
    assert full.max() == 2 and (full == 2).mean() > 0.95  # only sessions cut by the head end early


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"arrival": {"rate": -1}}, "arrival.rate"),
        ({"arrival": {"process": "poisson", "cv": 2}}, "arrival.cv"),
        ({"arrival": {"process": "weibull"}}, "arrival.process"),
        ({"classes": [{"name": "a", "weight": 0}]}, "a.weight"),
        ({"classes": [{"prompt": {"dist": "zipf"}}]}, "dist"),
        ({"classes": [{"name": "a"}, {"name": "a"}]}, "classes"),
        ({"num_requests": None}, "num_requests"),
        ({"typo": 1}, "generate"),
    ],
)
def test_bad_generator_config_names_the_field(bad: dict, field: str) -> None:
    with pytest.raises(T.TraceError) as exc:
        T.spec_from_dict(bad)
    assert exc.value.field == field


def test_generator_specs_are_workload_names(tmp_path) -> None:
    inline = T.load_workload("gen:rate=5,requests=300,process=gamma,cv=2,prompt_mean=256,seed=3")
    spec = T.spec_from_dict(
        {
            "arrival": {"rate": 5.0, "process": "gamma", "cv": 2.0},
            "num_requests": 300,
            "seed": 3,
            "classes": [{"prompt": {"dist": "lognormal", "mean": 256.0, "cv": 1.0}}],
        }
    )
    pd.testing.assert_frame_equal(inline, T.generate_workload(spec), check_like=False, check_exact=True)
    cfg = tmp_path / "mix.toml"
    cfg.write_text('num_requests = 50\nseed = 1\n[[classes]]\nname = "chat"\nsystem_prompt_tokens = 64\n')
    df = T.load_workload(str(cfg))
    assert len(df) == 50 and df.attrs["source"] == str(cfg) and df.attrs["prefix_block_size"] == 16
    with pytest.raises(T.TraceError) as exc:
        T.load_workload("gen:rate=fast")
    assert exc.value.field == "rate"
    with pytest.raises(T.TraceError, match="unknown key"):
        T.load_workload("gen:speed=3")
