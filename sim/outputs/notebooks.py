"""Execute the jupytext notebooks and render them to standalone HTML with their plots at full size.

`python -m schedsim.outputs.notebooks notebooks runs/notebooks` (what `make notebooks` runs).
Set SCHEDSIM_SMOKE=1 to run them at smoke size (the tests do).
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; line-height: 1.45; }}
pre {{ background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 90%; }}
pre.out {{ background: #fff; border-left: 3px solid #ddd; }}
pre.err {{ background: #fff0f0; }}
img {{ max-width: none; display: block; margin: .5em 0; }}
table {{ border-collapse: collapse; font-size: 90%; }} td, th {{ border: 1px solid #ddd; padding: 2px 6px; }}
</style></head><body>
{body}
</body></html>
"""


def execute_notebook(path: Path, timeout: int = 1800, cwd: Path | None = None) -> Any:
    """Read a percent-format .py notebook and execute it; a failing cell raises CellExecutionError."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd or path.parent)}}
    )
    client.execute()
    return nb


def _output_html(out: Any) -> str:
    """One cell output: images inline, HTML tables as they are, text in <pre>."""
    kind = out.get("output_type")
    if kind == "stream":
        cls = "out err" if out.get("name") == "stderr" else "out"
        return f'<pre class="{cls}">{html.escape(out.get("text", ""))}</pre>'
    if kind == "error":
        text = f"{out.get('ename', '')}: {out.get('evalue', '')}"
        return f'<pre class="out err">{html.escape(text)}</pre>'
    data = out.get("data", {})
    if "image/png" in data:
        return f'<img src="data:image/png;base64,{data["image/png"].strip()}">'
    if "text/html" in data:
        return str(data["text/html"])
    if "text/plain" in data:
        return f'<pre class="out">{html.escape(data["text/plain"])}</pre>'
    return ""


def notebook_html(nb: Any, title: str) -> str:
    """The executed notebook as one self-contained HTML page."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(md.render(cell.source))
        elif cell.cell_type == "code":
            parts.append(f"<pre>{html.escape(cell.source)}</pre>")
            parts += [_output_html(o) for o in cell.get("outputs", [])]
    return PAGE.format(title=html.escape(title), body="\n".join(parts))


def render_all(src: Path, out: Path, timeout: int = 1800, names: Sequence[str] = ()) -> list[Path]:
    """Execute every notebook under `src` (or the named ones); write .ipynb and .html under `out`."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src.glob("*.py")):
        if names and path.stem not in names:
            continue
        print(f"executing {path} ...", flush=True)
        nb = execute_notebook(path, timeout=timeout, cwd=out)
        nbformat.write(nb, out / f"{path.stem}.ipynb")
        page = out / f"{path.stem}.html"
        page.write_text(notebook_html(nb, path.stem))
        written.append(page)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry of `make notebooks`."""
    p = argparse.ArgumentParser(prog="python -m schedsim.outputs.notebooks", description=__doc__)
    p.add_argument("src", type=Path, help="folder of percent-format .py notebooks")
    p.add_argument("out", type=Path, help="folder for the executed .ipynb and .html")
    p.add_argument("--only", nargs="*", default=[], help="notebook stems to render (default: all)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    p.add_argument("--smoke", action="store_true", help="smoke size (sets SCHEDSIM_SMOKE=1)")
    args = p.parse_args(argv)
    if args.smoke:
        os.environ["SCHEDSIM_SMOKE"] = "1"
    pages = render_all(args.src.resolve(), args.out.resolve(), args.timeout, args.only)
    for page in pages:
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
