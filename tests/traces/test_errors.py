"""Every malformed input gets its own error naming file, line and field; skipping is reported."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import schedsim.traces as T

AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_ROWS = [
    "2023-11-16 18:15:46.6805900,374,44\n",
    "2023-11-16 18:15:50.9951690,396,109\n",
    "2023-11-16 18:15:51.2224670,879,55\n",
]


def az(*rows: str) -> bytes:
    return (AZ_HEAD + "".join(rows)).encode()


def mc(*recs: object, tail: str = "") -> bytes:
    return ("".join(json.dumps(r) + "\n" for r in recs) + tail).encode()


GOOD_MC = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
BURST = (
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
    "Log Type\n5,s1,1.5,ChatGPT,100,20,121,Conversation log\n"
)

# (name, file suffix, bytes, load options, line, field, message fragment)
CASES = [
    ("empty", ".csv", b"", {}, 1, None, "empty"),
    ("blank lines only", ".csv", b"\n \n", {}, 1, None, "empty"),
    ("header only", ".csv", AZ_HEAD.encode(), {}, None, None, "no valid data rows"),
    (
        "missing column",
        ".csv",
        b"TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
        {"format": "azure"},
        1,
        "GeneratedTokens",
        "missing column",
    ),
    (
        "extra column",
        ".csv",
        b"TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n2023-11-16 18:15:46,3,4,5\n",
        {"format": "azure"},
        1,
        "Extra",
        "unexpected column",
    ),
    (
        "duplicate column",
        ".csv",
        b"arrival_time,prompt_tokens,prompt_tokens,output_tokens\n1,2,3,4\n",
        {},
        1,
        "prompt_tokens",
        "duplicate column",
    ),
    (
        "row with extra field",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50,1,2,3\n"),
        {},
        3,
        None,
        "row has 4 fields, the header has 3",
    ),
    (
        "row with missing field",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50,1\n"),
        {},
        3,
        None,
        "row has 2 fields",
    ),
    (
        "non-numeric length",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50.1,abc,2\n"),
        {},
        3,
        "ContextTokens",
        "not a number: 'abc'",
    ),
    (
        "empty cell",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50.1,5,\n"),
        {},
        3,
        "GeneratedTokens",
        "missing value",
    ),
    (
        "negative length",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50.1,5,-3\n"),
        {},
        3,
        "GeneratedTokens",
        "negative token count",
    ),
    (
        "zero output",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50.1,5,0\n"),
        {},
        3,
        "GeneratedTokens",
        "below 1",
    ),
    (
        "fractional length",
        ".csv",
        az(AZ_ROWS[0], "2023-11-16 18:15:50.1,12.5,3\n"),
        {},
        3,
        "ContextTokens",
        "not a whole number",
    ),
    ("infinite length", ".csv", az("2023-11-16 18:15:50.1,inf,3\n"), {}, 2, "ContextTokens", "not finite"),
    (
        "huge length",
        ".csv",
        az("2023-11-16 18:15:50.1,1e12,3\n"),
        {},
        2,
        "ContextTokens",
        "implausibly large",
    ),
    (
        "unparsable timestamp",
        ".csv",
        az(AZ_ROWS[0], "yesterday noon,5,3\n"),
        {},
        3,
        "TIMESTAMP",
        "unparsable timestamp: 'yesterday noon'",
    ),
    ("decreasing timestamp", ".csv", az(AZ_ROWS[1], AZ_ROWS[0]), {}, 3, "TIMESTAMP", "decreases"),
    (
        "latin-1 byte",
        ".csv",
        az(AZ_ROWS[0]) + b"2023-11-16 18:15:50.1,5\xe9,3\n",
        {},
        3,
        "ContextTokens",
        "not valid UTF-8",
    ),
    (
        "latin-1 header",
        ".csv",
        b"TIMESTAMP,Context\xe9,GeneratedTokens\n1,2,3\n",
        {},
        1,
        None,
        "header is not valid UTF-8",
    ),
    (
        "utf-16 file",
        ".csv",
        "\ufeff".encode("utf-16-le") + az(AZ_ROWS[0]).decode().encode("utf-16-le"),
        {},
        1,
        None,
        "UTF-16",
    ),
    ("nul bytes", ".csv", b"TIMESTAMP\x00,x\n", {}, 1, None, "NUL"),
    (
        "negative timestamp",
        ".csv",
        b"arrival_time,prompt_tokens,output_tokens\n-1,2,3\n",
        {},
        2,
        "arrival_time",
        "negative timestamp",
    ),
    (
        "duplicate request id",
        ".csv",
        b"request_id,arrival_time,prompt_tokens,output_tokens\na,0,1,1\nb,1,1,1\na,2,1,1\n",
        {},
        4,
        "request_id",
        "duplicate request id 'a'",
    ),
    (
        "bad boolean",
        ".csv",
        b"arrival_time,prompt_tokens,output_tokens,structured_output\n0,1,1,maybe\n",
        {},
        2,
        "structured_output",
        "not a boolean",
    ),
    (
        "mapping names a missing column",
        ".csv",
        b"t,p,o\n0,1,1\n",
        {"mapping": {"arrival_time": "ts", "prompt_tokens": "p", "output_tokens": "o"}},
        1,
        "ts",
        "missing column",
    ),
    ("burstgpt total mismatch", ".csv", BURST.encode(), {}, 2, "Total tokens", "!= prompt + output"),
    (
        "mooncake truncated last line",
        ".jsonl",
        mc(GOOD_MC, tail='{"timestamp": 5, "input_len'),
        {},
        2,
        None,
        "truncated",
    ),
    (
        "mooncake invalid json",
        ".jsonl",
        mc(GOOD_MC, tail="{timestamp: 5}\n" + json.dumps(GOOD_MC)),
        {"format": "mooncake"},
        2,
        None,
        "invalid JSON",
    ),
    (
        "mooncake missing key",
        ".jsonl",
        mc(GOOD_MC, {"timestamp": 1, "input_length": 5, "output_length": 1}),
        {"format": "mooncake"},
        2,
        "hash_ids",
        "missing key",
    ),
    ("mooncake extra key", ".jsonl", mc(GOOD_MC, {**GOOD_MC, "foo": 1}), {}, 2, "foo", "unexpected key"),
    (
        "mooncake wrong hash count",
        ".jsonl",
        mc({**GOOD_MC, "hash_ids": [1, 2, 3]}),
        {},
        1,
        "hash_ids",
        "3 hash ids for 600 prompt tokens",
    ),
    (
        "mooncake hash not int",
        ".jsonl",
        mc({**GOOD_MC, "hash_ids": [1, "x"]}),
        {},
        1,
        "hash_ids",
        "list of integers",
    ),
    (
        "mooncake string length",
        ".jsonl",
        mc({**GOOD_MC, "input_length": "600"}),
        {},
        1,
        "input_length",
        "got a JSON string",
    ),
    (
        "mooncake boolean length",
        ".jsonl",
        mc({**GOOD_MC, "output_length": True}),
        {},
        1,
        "output_length",
        "got a JSON boolean",
    ),
    (
        "mooncake decreasing",
        ".jsonl",
        mc({**GOOD_MC, "timestamp": 9}, GOOD_MC),
        {},
        2,
        "timestamp",
        "decreases",
    ),
    ("json array record", ".jsonl", mc(GOOD_MC, [1, 2]), {"format": "mooncake"}, 2, None, "not an object"),
    (
        "jsonl invalid utf-8",
        ".jsonl",
        mc(GOOD_MC) + b'{"timestamp": "\xff"}\n',
        {"format": "mooncake"},
        2,
        None,
        "not valid UTF-8",
    ),
    ("empty jsonl", ".jsonl", b"", {"format": "jsonl"}, 1, None, "empty"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_names_line_and_field(tmp_path: Path, case: tuple) -> None:
    _name, suffix, data, opts, line, field, fragment = case
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(data)
    with pytest.raises(T.TraceError) as exc:
        T.load_workload(path, **opts)
    err = exc.value
    assert isinstance(err, ValueError)
    assert err.file == str(path)
    assert (err.line, err.field) == (line, field), str(err)
    assert fragment in str(err)
    assert str(err).startswith(str(path))


def test_decreasing_timestamp_names_both_lines_and_the_sort_option(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(az(AZ_ROWS[0], AZ_ROWS[2], AZ_ROWS[1]))
    with pytest.raises(T.TraceError) as exc:
        T.load_workload(path)
    assert exc.value.line == 4 and "on line 3" in str(exc.value) and "--sort" in str(exc.value)
    assert T.load_workload(path, sort=True)["prompt_tokens"].tolist() == [374, 396, 879]


def test_skip_bad_reports_count_and_first_lines(tmp_path: Path) -> None:
    rows = [
        AZ_ROWS[0],
        "2023-11-16 18:15:47,x,1\n",
        "2023-11-16 18:15:48,1\n",
        "2023-11-16 18:15:49,5,-2\n",
        AZ_ROWS[1],
        "garbage,1,1\n",
        AZ_ROWS[2],
    ]
    path = tmp_path / "s.csv"
    path.write_bytes(az(*rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = T.load_workload(path, skip_bad=True)
    assert df["prompt_tokens"].tolist() == [374, 396, 879]
    report = df.attrs["skipped_rows"]
    assert report["count"] == 4
    assert [r["line"] for r in report["first"]] == [3, 4, 5, 7]
    assert [r["field"] for r in report["first"]] == ["ContextTokens", "<row>", "GeneratedTokens", "TIMESTAMP"]
    messages = [str(w.message) for w in caught if issubclass(w.category, T.TraceWarning)]
    assert len(messages) == 1 and "skipped 4 bad row(s)" in messages[0] and "3 (" in messages[0]


def test_skip_bad_caps_the_listing_but_counts_everything(tmp_path: Path) -> None:
    good = [f"{i},1,1\n" for i in range(0, 40, 2)]
    bad = [f"{i},1,oops\n" for i in range(1, 40, 2)]
    rows = [r for pair in zip(good, bad, strict=True) for r in pair]
    path = tmp_path / "many.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(rows))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = T.load_workload(path, skip_bad=True)
    assert len(df) == 20 and df.attrs["skipped_rows"]["count"] == 20
    assert [r["line"] for r in df.attrs["skipped_rows"]["first"]] == [3, 5, 7, 9, 11]


def test_all_rows_bad_is_an_error_even_when_skipping(tmp_path: Path) -> None:
    path = tmp_path / "allbad.csv"
    path.write_bytes(az("x,1,1\n", "y,1,1\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(T.TraceError, match=r"no valid data rows \(2 bad row"):
            T.load_workload(path, skip_bad=True)


def test_validate_workload_names_row_and_field() -> None:
    df = T.generate_workload(T.WorkloadSpec(num_requests=5))
    df.loc[3, "output_tokens"] = 0
    with pytest.raises(T.TraceError) as exc:
        T.validate_workload(df)
    assert exc.value.field == "output_tokens" and "row 3" in str(exc.value)
