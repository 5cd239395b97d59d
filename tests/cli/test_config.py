"""CLI layer without simulating: flags generated from RunConfig, TOML files, overrides, errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from schedsim.cli.args import RUN_FLAG_NAMES, parse_key_value, parse_scalar, resolve_run_config
from schedsim.cli.main import build_parser, main
from schedsim.run.config import RunConfig


def _resolve(argv: list[str]) -> RunConfig:
    """Parse a `schedsim run ...` command line and resolve its RunConfig."""
    args = build_parser().parse_args(["run", *argv])
    return resolve_run_config(args)


def test_help_documents_every_runconfig_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(RunConfig):
        renamed = {"policy_options": "--policy-option", **RUN_FLAG_NAMES}
        flag = renamed.get(f.name, "--" + f.name.replace("_", "-"))
        assert flag in text, flag
        first_words = " ".join(f.metadata["help"].split()[:3])
        assert first_words in text, (f.name, first_words)
    for flag in (
        "--policy",
        "--trace",
        "--model",
        "--gpu",
        "--out",
        "--rate",
        "--max-requests",
        "--seed",
        "--config",
    ):
        assert flag in text


def test_no_flags_gives_runconfig_defaults() -> None:
    assert _resolve([]) == RunConfig()


def test_flags_are_typed() -> None:
    cfg = _resolve(
        [
            "--policy",
            "vllm",
            "--rate",
            "2.5",
            "--max-requests",
            "50",
            "--seed",
            "7",
            "--no-enable-chunked-prefill",
            "--num-gpu-blocks",
            "none",
            "--trace",
            "x.csv",
        ]
    )
    assert (cfg.policy, cfg.rate, cfg.max_requests, cfg.seed) == ("vllm", 2.5, 50, 7)
    assert cfg.enable_chunked_prefill is False and cfg.num_gpu_blocks is None and cfg.trace == "x.csv"


def test_fast_forward_is_on_by_default_and_the_switch_turns_it_off() -> None:
    assert _resolve([]).fast_forward is True
    assert _resolve(["--no-fast-forward"]).fast_forward is False


def test_list_and_dict_flags_keep_string_ids() -> None:
    cfg = _resolve(["--kv-load-failures", "5", "r7", "--abort-times", "12=0.5", "--abort-times", "r3=2"])
    assert cfg.kv_load_failures == ["5", "r7"]
    assert cfg.abort_times == {"12": 0.5, "r3": 2}


def test_toml_file_then_flags_override(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(
        'policy = "vllm"\nrate = 3.0\nseed = 1\nmax_requests = 40\n'
        '[policy_options]\nlong_prefill_token_threshold = 64\nfoo = "a"\n'
    )
    cfg = _resolve(
        ["--config", str(f), "--seed", "9", "--policy-option", "foo=b", "--policy-option", "bar=2"]
    )
    assert cfg.policy == "vllm" and cfg.rate == 3.0 and cfg.max_requests == 40
    assert cfg.seed == 9  # the flag beats the file
    assert cfg.policy_options == {"long_prefill_token_threshold": 64, "foo": "b", "bar": 2}


def test_unknown_key_names_key_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('policy = "vllm"\nmax_num_seq = 8\n')
    assert main(["run", "--config", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'max_num_seq'" in err and str(f) in err and "max_num_seqs" in err  # suggests known keys
    assert not (tmp_path / "o").exists()


def test_bad_value_names_field_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "neg.toml"
    f.write_text("rate = -1.0\n")
    assert main(["run", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert "RunConfig.rate" in err and str(f) in err


def test_invalid_toml_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "broken.toml"
    f.write_text('policy = "vllm"\nrate = = 2\n')
    assert main(["run", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "line 2" in err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_key_value_parsing() -> None:
    assert parse_key_value("a=1") == ("a", 1)
    assert parse_key_value("a = 0.5") == ("a", 0.5)
    assert parse_key_value("flag=true") == ("flag", True)
    assert parse_key_value("name=max-utilization") == ("name", "max-utilization")
    assert parse_scalar("[1, 2]") == [1, 2]
    with pytest.raises(Exception, match="key=value"):
        parse_key_value("novalue")


def test_policy_option_without_equals_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--policy-option", "oops"])
    assert "key=value" in capsys.readouterr().err


def test_policies_lists_every_registered_policy(capsys: pytest.CaptureFixture[str]) -> None:
    from schedsim.policies import list_policies

    assert main(["policies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    infos = list_policies()
    assert len(lines) == len(infos) >= 1
    for info, line in zip(infos, lines, strict=True):
        assert line.split()[0] == info.name and info.description.split()[0] in line


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert "run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        ("--policy", "nope", "unknown policy 'nope'"),
        ("--model", "gpt-9", "unknown model 'gpt-9'"),
        ("--gpu", "tpu", "unknown gpu 'tpu'"),
        ("--trace", "no-such-trace", "no-such-trace"),
        ("--policy-option", "zzz=1", "'zzz'"),
    ],
)
def test_bad_names_fail_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, expect: str
) -> None:
    out = tmp_path / "o"
    assert main(["run", flag, value, "--max-requests", "3", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err
    assert not out.exists()


def test_sweep_checks_every_point_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sw"
    assert (
        main(
            ["sweep", "--grid", "policy=vllm,nope", "--max-requests", "3", "--out", str(out), "--no-progress"]
        )
        == 2
    )
    assert "unknown policy 'nope'" in capsys.readouterr().err and not out.exists()
