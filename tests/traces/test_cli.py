"""`schedsim trace ...` through argparse and the handler, as the main CLI calls it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import schedsim.traces as T
from schedsim.cli.trace import add_parser, handle_trace


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="schedsim")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(argv)
    assert args.func is handle_trace
    return args.func(args)


def test_stats_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert run(["trace", "stats", "azure-code-2023", "--json", "--plot", str(tmp_path / "a.png")]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[: out.rindex("}") + 1])
    assert summary["requests"] == 8819
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_convert_with_transforms_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "c.parquet"
    assert (
        run(["trace", "convert", "azure-conv-2023", "--rate", "10", "--max-requests", "100", "-o", str(out)])
        == 0
    )
    df = T.load_workload(out)
    assert len(df) == 100
    ref = T.head(T.scale_rate(T.load_workload("azure-conv-2023"), 10), 100)
    assert df["arrival_time"].tolist() == pytest.approx(ref["arrival_time"].tolist())


def test_head_prints_rows(capsys: pytest.CaptureFixture) -> None:
    assert run(["trace", "head", "mooncake-synthetic", "-n", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and "prompt_tokens" in lines[0]


def test_generate_from_config_and_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        'seed = 4\nnum_requests = 200\n[arrival]\nprocess = "gamma"\ncv = 2.0\n'
        '[[classes]]\nname = "chat"\nsystem_prompt_tokens = 32\n'
        '[[classes]]\nname = "json"\nstructured_output = true\n'
    )
    out = tmp_path / "g.jsonl"
    assert run(["trace", "generate", "--config", str(cfg), "--rate", "8", "-o", str(out)]) == 0
    df = T.load_workload(out)
    assert len(df) == 200 and set(df["request_class"]) == {"chat", "json"}
    spec = T.spec_from_dict(
        {
            "seed": 4,
            "num_requests": 200,
            "arrival": {"process": "gamma", "cv": 2.0, "rate": 8},
            "classes": [
                {"name": "chat", "system_prompt_tokens": 32},
                {"name": "json", "structured_output": True},
            ],
        }
    )
    assert df["prompt_tokens"].tolist() == T.generate_workload(spec)["prompt_tokens"].tolist()


def test_per_format_loader_with_mapping_and_skip(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "m.csv"
    src.write_text("t,a,b\n0,5,1\n1,x,1\n2,7,2\n")
    out = tmp_path / "m2.csv"
    assert (
        run(
            [
                "trace",
                "csv",
                str(src),
                "--map",
                "arrival_time=t,prompt_tokens=a,output_tokens=b",
                "--skip-bad",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "skipped 1 bad row(s)" in err and "line(s) 3" in err
    assert T.load_workload(out)["prompt_tokens"].tolist() == [5, 7]


def test_concat_and_burstgpt_filters(tmp_path: Path) -> None:
    b = tmp_path / "b.csv"
    b.write_text(
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
        "Total tokens,Log Type\n1,s,1,ChatGPT,10,2,12,API log\n2,s,1,GPT-4,11,3,14,API log\n"
    )
    assert run(["trace", "burstgpt", str(b), "--model", "GPT-4", "-o", str(tmp_path / "g4.csv")]) == 0
    assert T.load_workload(tmp_path / "g4.csv")["prompt_tokens"].tolist() == [11]
    out = tmp_path / "cat.csv"
    assert run(["trace", "concat", str(tmp_path / "g4.csv"), str(tmp_path / "g4.csv"), "-o", str(out)]) == 0
    assert T.load_workload(out)["request_id"].tolist() == ["w0:0", "w1:0"]


def test_errors_exit_2_with_location(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:01,5,-1\n")
    assert run(["trace", "stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: field 'GeneratedTokens': negative token count" in err
    assert run(["trace", "convert", "azure-conv-2023", "-o", str(tmp_path / "x.txt")]) == 2
    assert run(["trace"]) == 1
