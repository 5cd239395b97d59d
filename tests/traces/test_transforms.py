"""Transforms keep rows honest (order, ids, counts) and stats agree with direct computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import schedsim.traces as T


@pytest.fixture(scope="module")
def conv() -> pd.DataFrame:
    return T.load_workload("azure-conv-2023")


def test_scale_rate_hits_the_target_and_keeps_order(conv: pd.DataFrame) -> None:
    fast = T.scale_rate(conv, 20.0)
    assert T.mean_rate(fast) == pytest.approx(20.0, rel=1e-12)
    assert fast["request_id"].tolist() == conv["request_id"].tolist()
    ratio = fast["arrival_time"].iloc[1:] / conv["arrival_time"].iloc[1:]
    assert np.allclose(ratio, ratio.iloc[0])  # one factor for every gap
    assert fast.attrs["transforms"] == ["scale_rate(20)"]
    single = T.head(conv, 1)
    assert T.scale_rate(single, 5.0)["arrival_time"].tolist() == [0.0]  # one request: no rate to scale


def test_scale_rate_of_a_burst_at_one_instant_says_it_had_no_effect(conv: pd.DataFrame) -> None:
    burst = T.head(conv, 3).assign(arrival_time=0.0)
    with pytest.warns(T.TraceWarning, match="all 3 requests arrive at one instant"):
        out = T.scale_rate(burst, 5.0)
    assert out["arrival_time"].tolist() == [0.0, 0.0, 0.0]
    assert out.attrs["transforms"][-1] == "scale_rate(5): no-op, no span"


def test_head_window_sample_filter(conv: pd.DataFrame) -> None:
    assert T.head(conv, 5)["request_id"].tolist() == conv["request_id"].head(5).tolist()
    w = T.window(conv, 600.0, 1200.0)
    raw = conv[(conv["arrival_time"] >= 600) & (conv["arrival_time"] < 1200)]
    assert len(w) == len(raw) and w["arrival_time"].min() >= 0 and w["arrival_time"].max() < 600
    s1, s2 = T.sample(conv, n=500, seed=3), T.sample(conv, n=500, seed=3)
    assert s1["request_id"].tolist() == s2["request_id"].tolist()
    assert s1["arrival_time"].is_monotonic_increasing and s1["request_id"].is_unique
    f = T.filter_rows(conv, "prompt_tokens < 1000")
    assert len(f) == int((conv["prompt_tokens"] < 1000).sum())
    assert f.attrs["filtered_rows"] == len(conv) - len(f)
    with pytest.raises(T.TraceError, match="bad filter"):
        T.filter_rows(conv, "no_such_column > 3")


def test_concat_sequential_and_interleave_keep_sources_apart() -> None:
    mc = T.load_workload("mooncake-synthetic").head(50)
    az = T.load_workload("azure-code-2023").head(30)
    seq = T.concat([mc, mc, az], gap=5.0)
    assert len(seq) == 130 and seq["request_id"].is_unique
    assert seq["arrival_time"].is_monotonic_increasing
    end0 = mc["arrival_time"].max()
    second = seq[seq["request_id"].str.startswith("w1:")]
    assert second["arrival_time"].min() == pytest.approx(end0 + 5.0)
    h = T.block_hashes_at(seq, 16)
    by_id = dict(zip(seq["request_id"], h, strict=True))
    assert by_id["w0:0"] != by_id["w1:0"]  # same raw hash ids, different sources: no sharing
    assert by_id["w2:0"] is None
    mixed = T.concat([mc, az], mode="interleave")
    assert mixed["arrival_time"].max() == pytest.approx(max(end0, az["arrival_time"].max()))


def test_stats_match_direct_computation(conv: pd.DataFrame, tmp_path: Path) -> None:
    st = T.trace_stats(conv, bins=10)
    s = st.summary.iloc[0]
    assert s["requests"] == len(conv) == st.rate["requests"].sum()
    assert s["prompt_tokens_total"] == conv["prompt_tokens"].sum()
    assert st.lengths.loc["output_tokens", "p99"] == np.percentile(conv["output_tokens"], 99)
    assert s["prefix_sharing_ratio"] == 0.0
    mc_df = T.load_workload("mooncake-synthetic", head=600)
    mc = T.trace_stats(mc_df)
    seen: set[int] = set()
    hits = 0
    for values in T.block_hashes_at(mc_df, 16):  # replay through an unbounded prefix cache
        hits += sum(v in seen for v in values)
        seen.update(values)
    want = hits * 16 / mc_df["prompt_tokens"].sum()
    assert mc.summary.iloc[0]["prefix_sharing_ratio"] == pytest.approx(want) and want > 0.05
    png = T.plot_workload(conv.head(2000), tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "length percentiles" in st.to_text()


def test_with_defaults_fills_every_optional_column(conv: pd.DataFrame) -> None:
    full = T.with_defaults(conv.head(4))
    assert list(full.columns) == [*T.REQUIRED_COLUMNS, *T.OPTIONAL_COLUMNS]
    assert full["priority"].tolist() == [0] * 4 and not full["structured_output"].any()
    assert full["max_tokens"].isna().all() and full["prompt_block_hashes"].isna().all()
    assert str(full["turn"].dtype) == "Int64"
    T.validate_workload(full)
    assert T.block_hashes_at(full, 16) == [None] * 4


def test_cap_tokens_takes_the_excess_from_both_in_proportion(conv: pd.DataFrame) -> None:
    rows = T.head(conv, 3).assign(prompt_tokens=[3000, 100, 4095], output_tokens=[2000, 50, 1])
    capped = T.cap_tokens(rows, 4096)
    # 904 over: ceil(904 * 3/5) = 543 off the prompt, ceil(904 * 2/5) = 362 off the output
    assert capped["prompt_tokens"].tolist() == [2457, 100, 4095]
    assert capped["output_tokens"].tolist() == [1638, 50, 1]
    assert rows["prompt_tokens"].tolist() == [3000, 100, 4095]  # the input is not modified
    assert capped.attrs["transforms"][-1] == "cap_tokens(4096)"
    with pytest.raises(T.TraceError, match="max_tokens"):
        T.cap_tokens(rows, 1)
