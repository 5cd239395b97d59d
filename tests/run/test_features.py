"""Request features a policy does not model: structured_fraction is refused under such a policy,
and a workload's structured_output and lora_id columns are named in a warning (the run goes on)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
from schedsim import RunConfig, simulate
from schedsim.cli.exit_codes import EXIT_BAD_INPUT
from schedsim.cli.main import main
from schedsim.run.resolve import check_config
from schedsim.run.toml_config import ConfigError
from schedsim.traces import TraceWarning

pytestmark = pytest.mark.pure_python


def workload() -> pd.DataFrame:
    """Three requests: two structured, two naming an adapter."""
    return pd.DataFrame(
        {
            "request_id": ["a", "b", "c"],
            "arrival_time": [0.0, 0.1, 0.2],
            "prompt_tokens": [10, 12, 8],
            "output_tokens": [5, 4, 3],
            "structured_output": [True, False, True],
            "lora_id": [1, None, 2],
        }
    )


def unmodelled(policy: str, **kw) -> list[str]:
    """The TraceWarnings a run of `workload()` under `policy` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate(
            RunConfig(policy=policy, num_gpu_blocks=64, max_model_len=512, **kw), workload=workload()
        )
    assert res.summary["num_finished"] == 3
    return [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]


@pytest.mark.parametrize("policy", ["orca", "sglang-overlap", "trtllm:max-utilization"])
def test_structured_fraction_is_refused_where_it_is_not_modelled(policy: str) -> None:
    cfg = RunConfig(policy=policy, structured_fraction=0.5, max_requests=5)
    want = f"structured_fraction: structured output is not modelled by '{policy}'"
    with pytest.raises(ConfigError, match=want):
        check_config(cfg)
    with pytest.raises(ConfigError, match=want):
        simulate(cfg)


def test_structured_fraction_runs_under_vllm() -> None:
    res = simulate(RunConfig(policy="vllm", structured_fraction=0.5, max_requests=20))
    assert res.summary["num_finished"] == 20


def test_a_replica_override_is_checked_against_its_own_policy() -> None:
    cfg = RunConfig(
        policy="vllm", structured_fraction=0.5, replicas=2, replica_overrides=[{"policy": "orca"}]
    )
    with pytest.raises(ConfigError, match="not modelled by 'orca'"):
        check_config(cfg)


def test_the_cli_refuses_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--policy", "sarathi", "--structured-fraction", "0.2", "--out", str(tmp_path / "o")]
    assert main([*argv, "--max-requests", "5", "--no-plots", "--no-progress"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("schedsim: error: structured_fraction: structured output is not modelled by")
    assert err.count("\n") == 1 and not (tmp_path / "o").exists()


def test_workload_columns_a_policy_ignores_are_named() -> None:
    assert unmodelled("vllm") == [
        "2 of 3 requests name a LoRA adapter (the lora_id column), which 'vllm' does not model (the "
        "trtllm:* policies model it with --policy-option max_peft_pages=N): they run as plain requests"
    ]
    orca = unmodelled("orca")
    assert len(orca) == 2 and orca[0].startswith("2 of 3 requests ask for structured output")
    assert "'orca' does not model (vllm and vllm-async model it)" in orca[0]


def test_adapters_are_modelled_by_trtllm_with_an_adapter_cache() -> None:
    budgeted = unmodelled("trtllm:guaranteed-no-evict", policy_options={"max_peft_pages": 8})
    assert [m[:40] for m in budgeted] == ["2 of 3 requests ask for structured outpu"]
    assert len(unmodelled("trtllm:guaranteed-no-evict")) == 2
