"""Prefix sharing: re-blocked hashes share exactly what the raw hash ids (or sessions) share."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import schedsim.traces as T
from hypothesis import given, settings
from hypothesis import strategies as st

DATA = Path(T.__file__).parent / "data"


def common(a: tuple | list | None, b: tuple | list | None) -> int:
    """Length of the common prefix."""
    n = 0
    for x, y in zip(a or (), b or (), strict=False):
        if x != y:
            break
        n += 1
    return n


def expected_shared(k: int, la: int, lb: int, source: int, target: int) -> int:
    """Target blocks shared: within both prompts' full blocks, and wholly inside k shared sources."""
    return min(min(la, lb) // target, k * source // target)


@pytest.fixture(scope="module")
def mooncake() -> pd.DataFrame:
    return T.load_workload("mooncake-synthetic")


def test_mooncake_sharing_matches_raw_hash_id_overlap(mooncake: pd.DataFrame) -> None:
    raw = [json.loads(line) for line in open(DATA / "mooncake_synthetic_trace.jsonl")]
    by_first: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(raw):
        by_first[r["hash_ids"][0]].append(i)
    groups = [g[:12] for g in by_first.values() if len(g) > 1]
    assert len(groups) > 20  # the sample really has shared prefixes
    pairs = [p for g in groups for p in itertools.combinations(g, 2)][:1500]
    rng = np.random.default_rng(0)
    pairs += [tuple(rng.choice(len(raw), 2, replace=False)) for _ in range(300)]
    sub = sorted({i for p in pairs for i in p})
    hashes = dict(zip(sub, T.block_hashes_at(mooncake.iloc[sub], 16), strict=True))
    shared_pairs = 0
    for a, b in pairs:
        ra, rb = raw[a], raw[b]
        k = common(ra["hash_ids"], rb["hash_ids"])
        want = expected_shared(k, ra["input_length"], rb["input_length"], 512, 16)
        assert common(hashes[a], hashes[b]) == want, (a, b)
        shared_pairs += want > 0
    assert shared_pairs > 100


def test_block_counts_cover_only_full_blocks(mooncake: pd.DataFrame) -> None:
    values = T.block_hashes_at(mooncake.head(200), 16)
    assert [len(v) for v in values] == (mooncake["prompt_tokens"].head(200) // 16).tolist()
    assert all(len(set(v)) == len(v) for v in values)  # positions never collide in a request


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=8),
    st.lists(st.integers(0, 3), max_size=8),
    st.integers(1, 4000),
    st.integers(1, 4000),
    st.sampled_from([1, 16, 100, 256, 512, 1000]),
    st.sampled_from([16, 64, 512]),
)
def test_reblock_shares_exactly_the_common_prefix(prefix, rest, la, lb, target, source) -> None:
    ha = tuple(prefix + rest)[: -(-la // source)]
    hb = tuple(prefix + [x + 10 for x in rest])[: -(-lb // source)]
    df = pd.DataFrame(
        {
            "request_id": ["a", "b"],
            "arrival_time": [0.0, 1.0],
            "prompt_tokens": [la, lb],
            "output_tokens": [1, 1],
            "prompt_block_hashes": [ha, hb],
        }
    )
    df.attrs["prefix_block_size"] = source
    va, vb = T.block_hashes_at(df, target)
    want = expected_shared(common(ha, hb), la, lb, source, target)
    assert common(va, vb) == want
    assert len(va) == min(la // target, len(ha) * source // target)


def test_no_hashes_means_unique_and_missing_block_size_is_an_error() -> None:
    az = T.load_workload("azure-code-2023").head(3)
    assert T.block_hashes_at(az, 16) == [None, None, None]
    bad = pd.DataFrame(
        {
            "request_id": ["a"],
            "arrival_time": [0.0],
            "prompt_tokens": [40],
            "output_tokens": [1],
            "prompt_block_hashes": [(1, 2)],
        }
    )
    with pytest.raises(T.TraceError, match="prefix_block_size"):
        T.block_hashes_at(bad, 16)


def test_session_turns_extend_earlier_prompts_exactly() -> None:
    chat = T.ClassSpec(
        "chat",
        prompt=T.LengthSpec("uniform", low=5, high=200),
        output=T.LengthSpec("uniform", low=1, high=100),
        turns=T.LengthSpec("fixed", value=4),
        think_time_s=3.0,
        system_prompt_tokens=100,
        system_prompts=2,
    )
    df = T.generate_workload(T.WorkloadSpec(classes=[chat], num_requests=400, seed=5))
    h = dict(zip(df["request_id"], T.block_hashes_at(df, 16), strict=True))
    rows = df.set_index("request_id")
    checked = 0
    for _sid, g in df.groupby("session_id"):
        g = g.sort_values("turn")
        prev = None
        for rid in g["request_id"]:
            if prev is not None:
                assert h[rid][: len(h[prev])] == h[prev]  # later turn contains the earlier prompt
                p, r = rows.loc[prev], rows.loc[rid]
                assert r["prompt_tokens"] > p["prompt_tokens"] + p["output_tokens"]
                checked += 1
            prev = rid
    assert checked > 50
    # different sessions share the system prompt's full blocks at most (bodies are unique)
    first = df[df["turn"] == 0]["request_id"].tolist()[:40]
    overlaps = {common(h[a], h[b]) for a, b in itertools.combinations(first, 2)}
    assert overlaps <= {0, 100 // 16} and 100 // 16 in overlaps


def test_prefix_sharing_ratio_counts_cache_hits() -> None:
    df = pd.DataFrame(
        {
            "request_id": ["a", "b", "c"],
            "arrival_time": [0.0, 1.0, 2.0],
            "prompt_tokens": [64, 64, 32],
            "output_tokens": [1, 1, 1],
            "prompt_block_hashes": [(1, 2, 3, 4), (1, 2, 9, 9), (7, 8)],
        }
    )
    df.attrs["prefix_block_size"] = 16
    out = T.prefix_sharing(df, 16)
    assert out["cacheable_tokens"] == 32  # b reuses a's first two blocks
    assert out["prefix_sharing_ratio"] == pytest.approx(32 / 160)
