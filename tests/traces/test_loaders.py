"""Loaders round-trip the shipped samples and synthetic files exactly (counts, sums, spans)."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import schedsim.traces as T

DATA = Path(T.__file__).parent / "data"
RAW_AZURE = {
    "azure-conv-2023": "AzureLLMInferenceTrace_conv.csv",
    "azure-code-2023": "AzureLLMInferenceTrace_code.csv",
}


def _raw_azure(path: Path) -> tuple[int, int, int, float]:
    """Independent reading with csv + datetime: rows, sums, span in seconds."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    ts = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]
    span = (max(ts) - min(ts)).total_seconds()
    return (
        len(rows),
        sum(int(r["ContextTokens"]) for r in rows),
        sum(int(r["GeneratedTokens"]) for r in rows),
        span,
    )


@pytest.mark.parametrize("name", sorted(RAW_AZURE))
def test_azure_shipped_round_trip(name: str) -> None:
    df = T.load_workload(name)
    n, prompt, output, span = _raw_azure(DATA / RAW_AZURE[name])
    assert len(df) == n
    assert int(df["prompt_tokens"].sum()) == prompt
    assert int(df["output_tokens"].sum()) == output
    assert df["arrival_time"].iloc[-1] == pytest.approx(span, abs=2e-6)
    assert df["arrival_time"].iloc[0] == 0.0
    assert list(df.columns) == list(T.REQUIRED_COLUMNS)
    assert df["request_id"].is_unique and df.attrs["source"] == name
    T.validate_workload(df)


def test_mooncake_shipped_round_trip() -> None:
    df = T.load_workload("mooncake-synthetic")
    recs = [json.loads(line) for line in open(DATA / "mooncake_synthetic_trace.jsonl")]
    assert len(df) == len(recs) == 3993
    assert int(df["prompt_tokens"].sum()) == sum(r["input_length"] for r in recs)
    assert int(df["output_tokens"].sum()) == sum(r["output_length"] for r in recs)
    span = (max(r["timestamp"] for r in recs) - min(r["timestamp"] for r in recs)) / 1000
    assert df["arrival_time"].iloc[-1] == pytest.approx(span)
    assert [list(h) for h in df["prompt_block_hashes"]] == [r["hash_ids"] for r in recs]
    assert df.attrs["prefix_block_size"] == 512


def test_shipped_data_and_licences_are_package_data() -> None:
    root = Path(T.__file__).parent
    for name in T.SHIPPED:
        assert T.shipped_path(name).is_file()
    licences = {p.name for p in (root / "LICENSES").iterdir()}
    assert {"CC-BY-4.0.txt", "Apache-2.0.txt"} <= licences
    assert "Splitwise" in (root / "LICENSES" / "ATTRIBUTION.md").read_text()
    assert "Attribution 4.0 International" in (root / "LICENSES" / "CC-BY-4.0.txt").read_text()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


BURST = (
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
    "Log Type\n"
    "5,s1,1.5,ChatGPT,100,20,120,Conversation log\n"
    "6,s2,1.0,GPT-4,50,10,60,API log\n"
    "8,s1,2.0,ChatGPT,300,30,330,Conversation log\n"
    "9,s3,0.5,ChatGPT,70,7,77,API log\n"
)


def test_burstgpt_filters_sessions_and_counts(tmp_path: Path) -> None:
    path = _write(tmp_path / "burst.csv", BURST)
    df = T.load_workload(path, model="ChatGPT", log_type="Conversation log")
    assert T.sniff_format(path) == "burstgpt"
    assert df["prompt_tokens"].tolist() == [100, 300]
    assert df["arrival_time"].tolist() == [0.0, 3.0]
    assert df["session_id"].tolist() == ["s1", "s1"] and df["turn"].tolist() == [0, 1]
    assert df.attrs["filtered_rows"] == 2
    everything = T.load_burstgpt(path)
    assert len(everything) == 4 and everything.attrs["filtered_rows"] == 0
    assert everything["request_class"].tolist() == ["ChatGPT", "GPT-4", "ChatGPT", "ChatGPT"]


def test_generic_csv_mapping_and_units(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.csv", "ts_ms,in,out,who\n1000,10,5,a\n1500,20,6,b\n4000,30,7,c\n")
    df = T.load_workload(
        path,
        mapping={"arrival_time": "ts_ms", "prompt_tokens": "in", "output_tokens": "out", "session_id": "who"},
        time_unit="ms",
    )
    assert df["arrival_time"].tolist() == [0.0, 0.5, 3.0]
    assert df["session_id"].tolist() == ["a", "b", "c"]
    assert df["output_tokens"].sum() == 18


def test_generic_jsonl_mapping(tmp_path: Path) -> None:
    lines = [{"t": 2.0, "p": 10, "o": 3, "id": "x"}, {"t": 2.5, "p": 11, "o": 4, "id": "y"}]
    path = _write(tmp_path / "y.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    df = T.load_workload(
        path, mapping={"arrival_time": "t", "prompt_tokens": "p", "output_tokens": "o", "request_id": "id"}
    )
    assert df["request_id"].tolist() == ["x", "y"]
    assert df["arrival_time"].tolist() == [0.0, 0.5]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_native_round_trip_keeps_everything(tmp_path: Path, suffix: str) -> None:
    spec = T.WorkloadSpec(
        classes=[
            T.ClassSpec(
                "chat",
                turns=T.LengthSpec("uniform", low=1, high=3),
                think_time_s=5,
                system_prompt_tokens=40,
                lora_id=3,
            ),
            T.ClassSpec("json", structured_output=True, priority=2, max_tokens=64),
        ],
        num_requests=60,
        seed=3,
    )
    df = T.generate_workload(spec)
    back = T.load_workload(T.write_workload(df, tmp_path / f"w{suffix}"))
    pd.testing.assert_frame_equal(back, df, check_exact=False, rtol=1e-9)
    assert back.attrs["prefix_block_size"] == 16
    assert T.block_hashes_at(back, 16) == T.block_hashes_at(df, 16)


def test_head_and_window_are_lazy(tmp_path: Path) -> None:
    good = "".join(f"{i},{i + 1},{i + 2}\n" for i in range(1, 2001))
    path = _write(tmp_path / "big.csv", "arrival_time,prompt_tokens,output_tokens\n" + good + "oops,1,1\n")
    with pytest.raises(T.TraceError):
        T.load_workload(path)
    assert len(T.load_workload(path, head=7)) == 7
    win = T.load_workload(path, window=(10.0, 20.0))
    assert win["prompt_tokens"].tolist() == list(range(12, 22))
    assert win["arrival_time"].iloc[0] == 0.0  # rows at 10, 11, ...: the window start is 0
    both = T.load_workload(path, window=(10.0, 20.0), head=3)
    assert both["prompt_tokens"].tolist() == [12, 13, 14]
    clean = _write(tmp_path / "clean.csv", "arrival_time,prompt_tokens,output_tokens\n" + good)
    srt = T.load_workload(clean, window=(10.5, 20.0), head=3, sort=True)  # sorting reads it all
    assert srt["prompt_tokens"].tolist() == [13, 14, 15] and srt["arrival_time"].iloc[0] == 0.5


def test_sort_option_sorts_instead_of_guessing(tmp_path: Path) -> None:
    path = _write(tmp_path / "u.csv", "arrival_time,prompt_tokens,output_tokens\n3,1,1\n1,2,2\n2,3,3\n")
    with pytest.raises(T.TraceError, match="decreases"):
        T.load_workload(path)
    df = T.load_workload(path, sort=True)
    assert df["prompt_tokens"].tolist() == [2, 3, 1]
    assert df["request_id"].tolist() == ["1", "2", "0"]  # ids keep the file order
    assert df["arrival_time"].tolist() == [0.0, 1.0, 2.0]


def test_gzip_and_bom_are_read(tmp_path: Path) -> None:
    import gzip

    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.5+00:00,5,6\n"
        "2024-05-10 00:00:01.75+00:00,7,8\n"
    )
    gz = tmp_path / "a.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    bom = tmp_path / "b.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    for path in (gz, bom):
        df = T.load_workload(path)
        assert df["arrival_time"].tolist() == [0.0, 1.25]
        assert np.array_equal(df["prompt_tokens"], [5, 7])


def test_load_workload_rejects_unknown_options_and_specs(tmp_path: Path) -> None:
    with pytest.raises(T.TraceError, match="do not apply") as exc:
        T.load_workload("azure-conv-2023", model="GPT-4")
    assert exc.value.field == "model"
    with pytest.raises(T.TraceError, match="not a shipped trace"):
        T.load_workload("azure-conv-2099")


def test_fast_and_exact_csv_readers_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schedsim.traces import csvload

    fast = T.load_workload("azure-code-2023")

    def no_fast(*_a: object, **_k: object) -> None:
        raise csvload.FastPathUnavailable

    monkeypatch.setattr(csvload, "iter_csv_chunks_fast", no_fast)
    exact = T.load_workload("azure-code-2023")
    pd.testing.assert_frame_equal(fast, exact)


def test_blank_lines_and_multiline_records_keep_exact_line_numbers(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "q.csv",
        'arrival_time,prompt_tokens,output_tokens,session_id\n0,1,1,"two\nlines"\n\n1,2,2,s\n2,x,3,s\n',
    )
    with pytest.raises(T.TraceError) as exc:
        T.load_workload(path)
    assert (exc.value.line, exc.value.field) == (6, "prompt_tokens")
    ok = _write(
        tmp_path / "ok.csv",
        'arrival_time,prompt_tokens,output_tokens,session_id\n0,1,1,"two\nlines"\n\n1,2,2,s\n',
    )
    assert T.load_workload(ok)["session_id"].tolist() == ["two\nlines", "s"]


def test_burstgpt_first_release_layout(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "v1.csv",
        "Timestamp,Model,Request tokens,Response tokens,"
        "Total tokens,Log Type\n0,ChatGPT,10,2,12,API log\n3,GPT-4,5,1,6,API log\n",
    )
    df = T.load_workload(path)
    assert df["prompt_tokens"].tolist() == [10, 5] and "session_id" not in df.columns
    half = _write(
        tmp_path / "half.csv",
        "Timestamp,Session ID,Model,Request tokens,"
        "Response tokens,Total tokens,Log Type\n0,s,ChatGPT,10,2,12,API log\n",
    )
    with pytest.raises(T.TraceError, match="missing column") as exc:
        T.load_burstgpt(half)
    assert exc.value.field == "Elapsed time"
