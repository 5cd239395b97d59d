"""`schedsim compare --variant`: a variant inherits the base run, and the table names each row's
resolved policy and every setting where the rows differ."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from schedsim.cli.main import main
from schedsim.experiments.compare import config_differences, make_variants
from schedsim.run.config import RunConfig


def _toml(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_variant_inherits_the_named_policy(tmp_path: Path) -> None:
    nopc = _toml(tmp_path, "no_prefix_cache", "enable_prefix_caching = false\n")
    variants = dict(make_variants(RunConfig(max_num_seqs=8), ["vllm"], [nopc]))
    assert list(variants) == ["vllm", "no_prefix_cache"]
    assert variants["no_prefix_cache"].policy == "vllm"  # not the default vllm-async
    assert variants["no_prefix_cache"].max_num_seqs == 8  # the base's flags carry over
    assert variants["no_prefix_cache"].enable_prefix_caching is False


def test_without_policies_the_base_run_is_the_first_row(tmp_path: Path) -> None:
    nopc = _toml(tmp_path, "nopc", "enable_prefix_caching = false\n")
    variants = make_variants(RunConfig(policy="sglang-overlap"), [], [nopc])
    assert [(label, c.policy) for label, c in variants] == [
        ("sglang-overlap", "sglang-overlap"),
        ("nopc", "sglang-overlap"),
    ]


def test_with_several_policies_a_variant_runs_on_each_unless_it_names_one(tmp_path: Path) -> None:
    nopc = _toml(tmp_path, "nopc", "enable_prefix_caching = false\n")
    own = _toml(tmp_path, "own", 'policy = "vllm"\nmax_num_batched_tokens = 512\n')
    variants = make_variants(RunConfig(), ["vllm,trtllm:max-utilization"], [nopc, own])
    assert [(label, c.policy) for label, c in variants] == [
        ("vllm", "vllm"),
        ("trtllm:max-utilization", "trtllm:max-utilization"),
        ("vllm+nopc", "vllm"),
        ("trtllm:max-utilization+nopc", "trtllm:max-utilization"),
        ("own", "vllm"),
    ]


def test_a_variants_policy_options_merge_over_the_bases(tmp_path: Path) -> None:
    lp = _toml(tmp_path, "lp", "[policy_options]\nlong_prefill_token_threshold = 256\n")
    base = RunConfig(policy="vllm", policy_options={"max_num_partial_prefills": 2})
    (_, variant) = make_variants(base, [], [lp])[1]
    assert variant.policy_options == {"max_num_partial_prefills": 2, "long_prefill_token_threshold": 256}


def test_differences_use_resolved_values_and_mark_missing_keys() -> None:
    configs = {
        "a": {
            "policy": "vllm",
            "seed": 0,
            "policy_config": {"enable_prefix_caching": True, "watermark": 0.0},
        },
        "b": {"policy": "vllm", "seed": 0, "policy_config": {"enable_prefix_caching": False}},
    }
    assert config_differences(configs) == {
        "enable_prefix_caching": ["true", "false"],
        "watermark": ["0.0", "-"],
    }


def test_the_printed_table_shows_policy_and_differing_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nopc = _toml(tmp_path, "no_prefix_cache", "enable_prefix_caching = false\n")
    out = tmp_path / "cmp"
    argv = ["compare", "--policies", "vllm", "--variant", str(nopc), "--max-requests", "8"]
    assert main([*argv, "--out", str(out), "--no-progress", "--no-plots"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["label", "vllm", "no_prefix_cache"]
    assert lines[1].split() == ["policy", "vllm", "vllm"]
    assert lines[2].split() == ["config.enable_prefix_caching", "true", "false"]
    assert not any(line.startswith("config.") for line in lines[3:])  # only the keys that differ
    table = pd.read_parquet(out / "compare.parquet")
    assert list(table["policy"]) == ["vllm", "vllm"]
    assert list(table["config.enable_prefix_caching"]) == ["true", "false"]
