"""The package's manners: a lazy root (importing a room imports nothing it does not need), and no
module reading another module's underscored names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("sim", "policies", "traces", "backend")
# Underscored names of other projects that a module documents why it needs.
ALLOWED = {
    ("sim/outputs/plot_worker.py", "_exit"),  # os._exit: the worker skips interpreter teardown
    ("backend/kernels/specialization.py", "_pack_args"),  # Triton's own argument binding, reused
}


def _modules_loaded(statement: str) -> set[str]:
    """Top-level module names a fresh interpreter has loaded after running `statement`."""
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement, absent",
    [
        ("import schedsim", {"pandas", "numpy", "simpy", "matplotlib", "schedsim.run"}),
        ("import schedsim.policies", {"pandas", "numpy", "simpy", "matplotlib", "pyarrow", "schedsim.run"}),
        ("import schedsim.traces", {"simpy", "matplotlib", "torch", "schedsim.run", "schedsim.policies"}),
        ("import schedsim.cli.main", {"simpy", "matplotlib", "torch", "schedsim.run.simulate"}),
    ],
)
def test_importing_a_room_imports_only_what_it_needs(statement: str, absent: set[str]) -> None:
    loaded = _modules_loaded(statement)
    assert not absent & loaded, f"{statement} imported {sorted(absent & loaded)}"


def test_the_root_package_serves_its_api_on_first_use() -> None:
    loaded = _modules_loaded("import schedsim; schedsim.RunConfig")
    assert "schedsim.run.config" in loaded and "simpy" not in loaded


def _private_reads(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every `from x import _y`, import of a `_module`, and `obj._y` not on self/cls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names] + [p for p in parts if p]
            found += [(node.lineno, n) for n in names if n.startswith("_") and not n.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
                continue
            found.append((node.lineno, node.attr))
    return found


def test_no_module_reads_another_modules_private_names() -> None:
    offenders = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if "_compiled" in path.parts:
                continue
            offenders += [
                f"{rel}:{line}: {name}" for line, name in _private_reads(path) if (rel, name) not in ALLOWED
            ]
    assert not offenders, "\n".join(offenders)
