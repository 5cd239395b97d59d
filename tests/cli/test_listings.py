"""`schedsim models/gpus` list the shipped specs; other rooms' commands are reachable from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedsim.cli.main import main


def _rows(out: str) -> list[str]:
    """Names in the first column of a listing, header excluded."""
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def test_models_lists_the_shipped_specs(capsys: pytest.CaptureFixture[str]) -> None:
    from schedsim.cli.listings import model_lines

    assert main(["models"]) == 0
    names = _rows(capsys.readouterr().out)
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b"} <= set(names)
    assert len(names) == len(model_lines()) - 1  # one header line


def test_gpus_lists_the_shipped_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus"]) == 0
    names = _rows(capsys.readouterr().out)
    assert {"a100-80gb", "h100-sxm", "h200", "l40s"} <= set(names)


def test_conformance_is_dispatched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = {
        "policy": "vllm",
        "config": {"num_gpu_blocks": 40},
        "requests": [{"id": "r0", "arrival_step": 0, "prompt_token_ids": [7] * 20, "max_tokens": 3}],
        "aborts": [],
        "num_steps": 5,
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    assert main(["conformance", str(path)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["step"] for x in lines] == list(range(5))
    assert lines[0]["scheduled"] == {"r0": 20}
    assert main(["conformance", str(tmp_path / "missing.json")]) == 2


@pytest.mark.parametrize("command", ["trace", "latency", "calibrate"])
def test_other_rooms_commands_have_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0 and f"schedsim {command}" in capsys.readouterr().out
