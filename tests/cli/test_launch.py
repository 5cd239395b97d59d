"""The script's entry point: Ctrl-C while the command line is still importing is one line, exit 130."""

from __future__ import annotations

import builtins
import sys
from typing import Any

import pytest
from schedsim.cli import launch

pytestmark = pytest.mark.pure_python


def test_ctrl_c_during_the_imports_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def interrupted(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "schedsim.cli.main":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "schedsim.cli.main", raising=False)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert launch.main() == 130
    assert capsys.readouterr().err == "schedsim: interrupted; nothing written\n"


def test_otherwise_it_runs_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["schedsim", "policies"])
    assert launch.main() == 0
    assert "vllm-async" in capsys.readouterr().out
