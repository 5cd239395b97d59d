"""Bad input ends in one line `schedsim: error: <field>: <why> (got <value>)` and exit 2, never a
traceback; output into a closed pipe ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from schedsim.cli.main import main
from schedsim.run.config import RunConfig
from schedsim.run.fieldtypes import describe, matches
from schedsim.run.resolve import check_config
from schedsim.run.toml_config import ConfigError

pytestmark = pytest.mark.pure_python


def _fails_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *expect: str) -> str:
    """Run the CLI; assert exit 2 and one `schedsim: error:` line holding every expected piece."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedsim: error: "), err
    for piece in expect:
        assert piece in lines[0], (piece, lines[0])
    return lines[0]


def _run(tmp_path: Path, *extra: str) -> list[str]:
    """A small `schedsim run` command line writing under tmp_path."""
    return ["run", "--max-requests", "5", "--out", str(tmp_path / "o"), "--no-progress", "--no-plots", *extra]


@pytest.mark.parametrize(
    ("toml", "expect"),
    [
        ('enable_prefix_caching = "yes"\n', ("enable_prefix_caching", "'yes'", "true, false or none")),
        ('rate = "4"\n', ("rate:", "'4'", "a number")),
        ("max_num_seqs = 2.5\n", ("max_num_seqs", "2.5", "an integer")),
        ('kv_load_failures = "r1"\n', ("kv_load_failures", "'r1'", "a list of strings")),
        (
            '[policy_options]\nlong_prefill_token_threshold = "big"\n',
            ("long_prefill_token_threshold", "'big'"),
        ),
    ],
)
def test_wrong_types_in_toml_name_field_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, expect: tuple[str, ...]
) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(toml)
    _fails_with_one_line(_run(tmp_path, "--config", str(f)), capsys, *expect)
    assert not (tmp_path / "o").exists()


def test_string_policy_option_flag_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _run(tmp_path, "--policy", "vllm", "--policy-option", "long_prefill_token_threshold=big")
    _fails_with_one_line(argv, capsys, "policy_options.long_prefill_token_threshold", "'big'")


def test_unknown_abort_id_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with_one_line(_run(tmp_path, "--abort-times", "nope=1.0"), capsys, "abort_times", "'nope'")
    _fails_with_one_line(_run(tmp_path, "--kv-load-failures", "ghost"), capsys, "kv_load_failures", "'ghost'")


def test_tp_must_divide_the_heads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with_one_line(_run(tmp_path, "--tp", "3"), capsys, "tp:", "32 attention heads", "(got 3)")
    check_config(RunConfig(tp=2, max_requests=5))  # a divisor is fine


@pytest.mark.parametrize("policy", ["vllm", "vllm-async", "trtllm:max-utilization"])
def test_block_size_must_be_a_power_of_two_for_vllm_and_trtllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    argv = _run(tmp_path, "--policy", policy, "--block-size", "12")
    _fails_with_one_line(argv, capsys, "block_size", "power of two", "(got 12)")


def test_sglang_takes_any_block_size() -> None:
    check_config(RunConfig(policy="sglang-overlap", block_size=12, max_requests=5))
    check_config(RunConfig(policy="vllm", block_size=4, max_requests=5))
    with pytest.raises(ConfigError, match="block_size"):
        check_config(RunConfig(policy="vllm", block_size=24))


def test_arrivals_beyond_the_clock_resolution_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "ns.csv"  # nanosecond timestamps, 10 s apart, read as seconds
    rows = [f"r{i},{1.7e18 + i * 1e10:.0f},100,10" for i in range(5)]
    trace.write_text("request_id,arrival_time,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    _fails_with_one_line(
        _run(tmp_path, "--trace", str(trace)), capsys, "arrival_time", "request r1", "(got 10000000000.0)"
    )
    assert not (tmp_path / "o").exists()


def test_runconfig_checks_types_in_python_too() -> None:
    with pytest.raises(
        ValueError, match=r"enable_prefix_caching: expected true, false or none \(got 'yes'\)"
    ):
        RunConfig(enable_prefix_caching="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed: expected an integer"):
        RunConfig(seed=True)
    assert RunConfig(rate=4).rate == 4  # an integer is a number


def test_type_descriptions_and_matches() -> None:
    assert describe(int | None) == "an integer or none"
    assert describe(dict[str, float]) == "a table of numbers"
    assert matches(dict[str, float], {"r1": 2}) and not matches(dict[str, float], {"r1": "2"})
    assert matches(list[str], ["a"]) and not matches(list[str], [1])
    assert not matches(float, True) and matches(float, 3)


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) is gone before the first line
    env = {**os.environ, "SCHEDSIM_PURE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "schedsim.cli.main", "policies"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
    )
    os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


def test_a_pd_pair_of_a_policy_without_kv_transfer_is_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _run(tmp_path, "--pd", "1:1", "--policy", "sglang-overlap")
    _fails_with_one_line(
        argv, capsys, "RunConfig.pd", "replica 0's policy 'sglang-overlap'", "SupportsKVTransfer"
    )
    assert not (tmp_path / "o").exists()


def test_sweep_refuses_ray_without_ray_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where the extra is not installed
    argv = ["sweep", "--grid", "rate=1,2", "--max-requests", "3", "--engine", "ray"]
    _fails_with_one_line(
        [*argv, "--out", str(tmp_path / "s"), "--no-progress"], capsys, "pip install 'schedsim[ray]'"
    )
    assert not (tmp_path / "s").exists()


def test_sweep_refuses_an_x_that_is_not_swept_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sweep", "--grid", "rate=1,2", "--max-requests", "3", "--x", "max_num_seqs"]
    _fails_with_one_line(
        [*argv, "--out", str(tmp_path / "s"), "--no-progress"], capsys, "--x", "'max_num_seqs'", "rate"
    )
    assert not (tmp_path / "s").exists()


def test_sweep_names_a_metric_the_results_lack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--grid", "rate=1,2", "--max-requests", "3", "--metrics", "p99_ttft_ms,p99_ttft"]
    assert main([*argv, "--out", str(tmp_path / "s"), "--no-progress", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "schedsim: warning: --metrics: no column p99_ttft in the results" in err and "p99_ttft_ms" in err
    assert (tmp_path / "s" / "sweep_p99_ttft_ms_vs_rate.png").exists()


def test_a_max_model_len_beyond_the_models_context_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _run(tmp_path, "--max-model-len", "200000", "--num-gpu-blocks", "20000")
    _fails_with_one_line(argv, capsys, "max_model_len", "llama-3.1-8b's context length of 131072", "200000")
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="context length of 4096"):
        check_config(RunConfig(model="llama-2-7b", max_model_len=4097, num_gpu_blocks=1000))
    check_config(
        RunConfig(model="llama-2-7b", max_model_len=4096, num_gpu_blocks=1000)
    )  # the context itself is fine


def test_a_pd_pair_checks_each_replicas_own_policy() -> None:
    overridden = RunConfig(pd="1:1", policy="vllm", replica_overrides=[{}, {"policy": "sglang-overlap"}])
    with pytest.raises(ConfigError, match="replica 1's policy 'sglang-overlap'"):
        check_config(overridden)
    check_config(RunConfig(pd="1:1", policy="vllm"))  # both replicas run the base vllm: accepted
