"""Execute every notebook at smoke size (SCHEDSIM_SMOKE=1); a failing cell fails the test."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from schedsim.outputs.notebooks import execute_notebook, notebook_html

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.py"))
HAVE_TORCH = importlib.util.find_spec("torch") is not None
BACKEND_NOTEBOOKS = {"05_simulator_vs_backend"}  # without torch: no backend, they say so instead of plotting


def test_the_notebooks_are_there() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_size(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDSIM_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = execute_notebook(path, timeout=120, cwd=tmp_path)  # raises CellExecutionError on a failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    if path.stem in BACKEND_NOTEBOOKS and not HAVE_TORCH:
        assert "skipped: torch is not installed" in "".join(o.get("text", "") for o in outputs)
    else:
        assert images, "every notebook shows at least one plot"
    page = notebook_html(nb, path.stem)
    assert page.count('<img src="data:image/png;base64,') == len(images)
    assert "<h1>" in page  # the markdown title rendered


def test_the_validation_notebook_without_torch_says_it_skips_instead_of_drawing_empty_axes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "torch.py").write_text('raise ImportError("no torch here")\n')
    monkeypatch.setenv("PYTHONPATH", f"{shim}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("SCHEDSIM_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = next(p for p in NOTEBOOKS if p.name.startswith("05"))
    nb = execute_notebook(path, timeout=120, cwd=tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if "image/png" in o.get("data", {})]
    text = "".join(o.get("text", "") for o in outputs)
    assert "skipped: torch is not installed" in text and "torch available: False" in text
