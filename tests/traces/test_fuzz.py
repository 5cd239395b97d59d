"""Fuzz: corrupted files either load with exactly the right data or raise TraceError — nothing else."""

from __future__ import annotations

import csv
import io
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import schedsim.traces as T
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DATA = Path(T.__file__).parent / "data"
AZURE = b"".join(open(DATA / "AzureLLMInferenceTrace_conv.csv", "rb").readlines()[:25])
MOONCAKE = "".join(
    json.dumps(
        {
            "timestamp": 100 * i,
            "input_length": 20 + 300 * i,
            "output_length": i + 1,
            "hash_ids": list(range(-(-(20 + 300 * i) // 512))),
        }
    )
    + "\n"
    for i in range(12)
).encode()


def _ops() -> st.SearchStrategy:
    """One corruption: a byte flip/insert/delete, a truncation, or a line-level edit."""
    byte_op = st.tuples(
        st.sampled_from(["flip", "insert", "delete"]),
        st.floats(0, 1, exclude_max=True),
        st.binary(min_size=1, max_size=4),
    )
    line_op = st.tuples(
        st.sampled_from(["dup_line", "swap_lines", "drop_field", "add_field", "blank_field", "garbage_line"]),
        st.floats(0, 1, exclude_max=True),
        st.floats(0, 1, exclude_max=True),
    )
    cut = st.tuples(st.just("truncate"), st.floats(0, 1), st.just(b""))
    return st.one_of(byte_op, line_op, cut)


def corrupt(data: bytes, op: tuple) -> bytes:
    """Apply one corruption at a relative position."""
    kind, where, extra = op
    pos = int(where * len(data))
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ (extra[0] or 1)]) + data[pos + 1 :]
    if kind == "insert":
        return data[:pos] + extra + data[pos:]
    if kind == "delete":
        return data[:pos] + data[pos + len(extra) :]
    if kind == "truncate":
        return data[:pos]
    lines = data.split(b"\n")
    i, j = int(where * len(lines)), int(extra * len(lines))
    sep = b", " if data.lstrip().startswith(b"{") else b","
    if kind == "dup_line":
        lines.insert(i, lines[i])
    elif kind == "swap_lines":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "drop_field":
        lines[i] = sep.join(lines[i].split(sep)[:-1])
    elif kind == "add_field":
        lines[i] = lines[i] + sep + b"7"
    elif kind == "blank_field":
        parts = lines[i].split(sep)
        parts[j % len(parts)] = b""
        lines[i] = sep.join(parts)
    else:
        lines.insert(i, b'\x00garbage\xff,,"')
    return b"\n".join(lines)


def oracle_azure(data: bytes) -> pd.DataFrame:
    """Independent reading of the Azure format; raises on anything it cannot read."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r and any(c.strip() for c in r)]
    assert [c.strip() for c in rows[0]] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    out = []
    for r in rows[1:]:
        assert len(r) == 3
        ts = pd.Timestamp(r[0].strip())
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
        p, o = float(r[1]), float(r[2])
        assert p == int(p) >= 1 and o == int(o) >= 1
        out.append((ts.value, int(p), int(o)))
    ns = np.array([x[0] for x in out], dtype=np.int64)
    assert len(out) and np.all(np.diff(ns) >= 0)
    return pd.DataFrame(
        {
            "arrival_time": (ns - ns[0]) / 1e9,
            "prompt_tokens": [x[1] for x in out],
            "output_tokens": [x[2] for x in out],
        }
    )


def oracle_mooncake(data: bytes) -> pd.DataFrame:
    """Independent reading of Mooncake JSONL."""
    recs = [json.loads(line.decode("utf-8")) for line in data.split(b"\n") if line.strip()]
    keys = {"timestamp", "input_length", "output_length", "hash_ids"}
    for r in recs:
        assert isinstance(r, dict) and set(r) == keys
        for k in ("timestamp", "input_length", "output_length"):
            assert type(r[k]) in (int, float) and r[k] == int(r[k])
        assert r["input_length"] >= 1 and r["output_length"] >= 1 and r["timestamp"] >= 0
        assert all(type(h) is int for h in r["hash_ids"])
        assert r["input_length"] // 512 <= len(r["hash_ids"]) <= -(-r["input_length"] // 512)
    t = np.array([r["timestamp"] for r in recs], dtype=float)
    assert len(recs) and np.all(np.diff(t) >= 0)
    return pd.DataFrame(
        {
            "arrival_time": (t - t[0]) / 1000,
            "prompt_tokens": [int(r["input_length"]) for r in recs],
            "output_tokens": [int(r["output_length"]) for r in recs],
            "hashes": [tuple(r["hash_ids"]) for r in recs],
        }
    )


def _check(data: bytes, suffix: str, oracle) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"f{suffix}"
        path.write_bytes(data)
        try:
            df = T.load_workload(path, format="azure" if suffix == ".csv" else "mooncake")
        except T.TraceError as exc:
            assert exc.file == str(path)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                skipped = T.load_workload(
                    path, skip_bad=True, format="azure" if suffix == ".csv" else "mooncake"
                )
            except T.TraceError:
                skipped = None
    want = oracle(data)  # the loader accepted the file, so the oracle must read it the same way
    np.testing.assert_allclose(df["arrival_time"], want["arrival_time"], atol=1e-6)
    assert df["prompt_tokens"].tolist() == want["prompt_tokens"].tolist()
    assert df["output_tokens"].tolist() == want["output_tokens"].tolist()
    if "hashes" in want:
        assert df["prompt_block_hashes"].tolist() == want["hashes"].tolist()
    assert skipped is not None and skipped.attrs["skipped_rows"]["count"] == 0
    T.validate_workload(df)


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
@SETTINGS
@given(ops=st.lists(_ops(), min_size=1, max_size=3))
def test_fuzz_row_corruptions(fmt: str, ops: list) -> None:
    data, suffix, oracle = (
        (AZURE, ".csv", oracle_azure) if fmt == "azure" else (MOONCAKE, ".jsonl", oracle_mooncake)
    )
    for op in ops:
        data = corrupt(data, op) if data else data
    _check(data, suffix, oracle)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["auto", "azure", "mooncake", "csv", "jsonl", "burstgpt"]))
def test_fuzz_random_bytes_raise_only_trace_error(data: bytes, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.bin"
        path.write_bytes(data)
        for skip in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    T.validate_workload(T.load_workload(path, format=fmt, skip_bad=skip))
                except T.TraceError:
                    pass


def test_uncorrupted_inputs_load() -> None:
    _check(AZURE, ".csv", oracle_azure)
    _check(MOONCAKE, ".jsonl", oracle_mooncake)
