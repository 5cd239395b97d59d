"""The docs are reference documentation of the tree as it is. Every relative link of README.md and
docs/*.md opens a file (and its #anchor a heading there), every repository path they name is on
disk, every dotted `schedsim.x.y` name is a module of the package or a top-level name of one,
every `schedsim <command> --flag` they show is a flag of that command, every example marked
runnable runs at smoke size (docs/index.md, "Runnable examples"), no page tells development
history or points outside the repository, and README's layout table is the package tree."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from schedsim.cli.main import build_parser
from schedsim.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# import name prefix -> folder (pyproject's package-dir), longest first
PACKAGE_DIRS = (
    ("schedsim.policies", "policies"),
    ("schedsim.traces", "traces"),
    ("schedsim.backend", "backend"),
    ("schedsim", "sim"),
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a path in the repository: a top-level folder, then anything up to a file suffix (not inside a
# longer path or URL, so `vllm/v1/core/sched/scheduler.py` is not taken for ours)
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:sim|policies|traces|backend|tests|bench|examples|notebooks)/[\w./-]*?"
    r"\.(?:py|md|toml|json|jsonl))(?![\w/-])"
)
# build outputs that exist once the compiled core is built (git ignores them)
GENERATED = ("sim/_compiled/",)
DOTTED = re.compile(r"(?<![\w.])(schedsim(?:\.[A-Za-z_]\w*)+)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def _anchors(path: Path) -> set[str]:
    """Anchors of a markdown file's headings (outside code fences)."""
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def _doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_relative_links_open_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(
                f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{_doc_id(doc)} links: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_named_repository_paths_exist(doc: Path) -> None:
    named = {p for p in REPO_PATH.findall(doc.read_text()) if not p.startswith(GENERATED)}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{_doc_id(doc)} names paths that do not exist: {missing}"


@cache
def _top_level_names(source: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level (and the PEP 562 lazy ones it lists)."""
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            if isinstance(node.value, ast.Dict) and any(  # the root package's _LAZY table
                isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets
            ):
                names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.If):  # TYPE_CHECKING imports and the like
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom | ast.Import):
                    names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return frozenset(names)


def _module_file(dotted: str) -> Path | None:
    """The source of a schedsim module under the package-dir layout, None if there is none."""
    for prefix, folder in PACKAGE_DIRS:
        if dotted == prefix or dotted.startswith(prefix + "."):
            rest = dotted[len(prefix) :].lstrip(".").split(".") if dotted != prefix else []
            base = ROOT.joinpath(folder, *rest)
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if rest and candidate.exists() or not rest and candidate.name == "__init__.py":
                    return candidate if candidate.exists() else None
            return None
    return None


ENTRY_POINT_GROUPS = {"schedsim.routers"}  # plugin groups named like modules (pyproject entry points)


def _resolves(dotted: str) -> bool:
    """The longest module prefix exists and the next part, if any, is a top-level name of it."""
    if dotted in ENTRY_POINT_GROUPS:
        return True
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        source = _module_file(".".join(parts[:cut]))
        if source is not None:
            return cut == len(parts) or parts[cut] in _top_level_names(source)
    return False


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_dotted_schedsim_names_exist(doc: Path) -> None:
    text = doc.read_text()
    unknown = sorted({d.rstrip(".") for d in DOTTED.findall(text) if not _resolves(d.rstrip("."))})
    assert not unknown, f"{_doc_id(doc)} names schedsim modules or names that do not exist: {unknown}"


# ---------------------------------------------------------------------------------------------
# Runnable examples. A fenced block whose info string carries the word `run` after its language
# (```bash run, ```python run, ```toml run file=sweep.toml) is executed, in document order, at
# smoke size (docs/index.md, "Runnable examples"): schedsim commands run in this process through
# `schedsim.cli.main.main`, python blocks through exec, toml blocks are written to their `file=`.

SMOKE_REQUESTS = 8
FENCE = re.compile(r"^```(\S*)(.*)$")
COMMANDS_WITH_REQUESTS = ("run", "compare", "sweep", "validate")
# what each command gets appended at smoke size (flags given later win in argparse)
SMOKE_FLAGS = {
    "run": ["--no-progress", "--no-plots"],
    "compare": ["--no-progress", "--no-plots"],
    "sweep": ["--no-progress", "--workers", "1"],
    "validate": ["--no-progress", "--grid", "quick"],
}
# repository folders a runnable example may name by a relative path (linked into its folder)
LINKED = ("tests", "traces", "examples", "notebooks", "bench")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its info-string options, its text and where it starts."""

    doc: Path
    line: int
    lang: str
    options: dict[str, str]
    text: str

    @property
    def runnable(self) -> bool:
        return "run" in self.options

    def id(self) -> str:
        return f"{_doc_id(self.doc)}:{self.line}"


def _blocks(doc: Path) -> list[Block]:
    """Every fenced block of a markdown file."""
    out: list[Block] = []
    lines = doc.read_text().splitlines()
    start: tuple[int, str, dict[str, str]] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if match and start is None:
            words = match.group(2).split()
            options = {w.partition("=")[0]: w.partition("=")[2] for w in words}
            start, body = (number, match.group(1), options), []
        elif line.startswith("```") and start is not None:
            out.append(Block(doc, start[0], start[1], start[2], "\n".join(body) + "\n"))
            start = None
        elif start is not None:
            body.append(line)
    return out


ALL_BLOCKS = [b for doc in DOCS for b in _blocks(doc)]
RUNNABLE = [b for b in ALL_BLOCKS if b.runnable]


def _commands(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        for part in shlex_split(line):
            if part:
                out.append(part)
    return out


def shlex_split(line: str) -> list[str]:
    """One line's `;`-separated commands, each re-quoted, comments removed."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token == ";":
            commands.append([])
        else:
            commands[-1].append(token)
    return [shlex.join(c) for c in commands if c]


def smoke_argv(argv: list[str]) -> list[str]:
    """A schedsim command at smoke size: few requests, no progress bar or plots, one worker."""
    command = argv[0] if argv else ""
    extra = list(SMOKE_FLAGS.get(command, []))
    if command in COMMANDS_WITH_REQUESTS:
        extra += ["--max-requests", str(SMOKE_REQUESTS)]
    if "--help" in argv or "-h" in argv:
        extra = []
    return argv + extra


def smoke_python(source: str) -> str:
    """A python block at smoke size: every `max_requests=N` becomes the smoke count."""
    return re.sub(r"\bmax_requests=\d[\d_]*", f"max_requests={SMOKE_REQUESTS}", source)


def _missing_need(block: Block) -> str | None:
    """Why a block cannot run here (None: it can)."""
    if "slow" in block.options and not os.environ.get("SCHEDSIM_DOCS_SLOW"):
        return "a slow example (tens of seconds): SCHEDSIM_DOCS_SLOW=1 runs it"
    need = block.options.get("needs", "")
    if need == "torch" and importlib.util.find_spec("torch") is None:
        return "needs torch (the backend extra)"
    if need == "ray" and importlib.util.find_spec("ray") is None:
        return "needs ray (the ray extra)"
    if need == "gpu":
        torch = importlib.util.find_spec("torch") and importlib.import_module("torch")
        if not torch or not torch.cuda.is_available():
            return "needs a CUDA GPU"
    return None


def _prepare_folder(block: Block, folder: Path) -> None:
    """Repository folders linked in, and the doc's runnable `file=` blocks written."""
    for name in LINKED:
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    for other in _blocks(block.doc):
        if other.runnable and other.options.get("file"):
            (folder / other.options["file"]).write_text(other.text)


def _run_schedsim(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> int:
    """One `schedsim` command in this process (argparse's exits become exit codes)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        return cli_main(smoke_argv(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def _run_shell_block(block: Block, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each command of a shell block; returns the failures (command and exit code)."""
    expected = int(block.options.get("exit", "0"))
    failures = []
    for command in _commands(block.text):
        words = shlex.split(command)
        env = {}
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words and words[0] == "schedsim" and "subprocess" in block.options:
            argv = [sys.executable, "-m", "schedsim.cli.main", *smoke_argv(words[1:])]
            code = _subprocess(argv, env)
        elif words and words[0] == "schedsim":
            code = _run_schedsim(words[1:], env, monkeypatch)
        else:
            path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
            done = subprocess.run(
                command, shell=True, env={**os.environ, "PATH": path, **env}, capture_output=True, timeout=120
            )
            code = done.returncode
        if code != expected:
            failures.append(f"`{command}` exited {code}, expected {expected}")
    return failures


def _subprocess(argv: list[str], env: dict[str, str]) -> int:
    """One command in a fresh interpreter in the current folder (importable: PYTHONPATH)."""
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        argv, env={**os.environ, "PYTHONPATH": path, **env}, capture_output=True, timeout=300
    )
    if done.returncode:
        sys.stderr.write(done.stderr.decode(errors="replace")[-2000:])
    return done.returncode


@pytest.mark.parametrize("block", RUNNABLE, ids=Block.id)
def test_runnable_example(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = _missing_need(block)
    if reason:
        pytest.skip(reason)
    _prepare_folder(block, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCHEDSIM_PLOT_WORKER", "0")
    if block.lang in ("bash", "sh", "console"):
        failures = _run_shell_block(block, monkeypatch)
        assert not failures, f"{block.id()}: " + "; ".join(failures) + "\n" + capsys.readouterr().err[-2000:]
    elif block.lang == "python" and block.options.get("file"):
        compile(block.text, block.id(), "exec")  # a module the doc's other blocks import
    elif block.lang == "python" and "subprocess" in block.options:
        (tmp_path / "doc_example.py").write_text(smoke_python(block.text))
        assert _subprocess([sys.executable, "doc_example.py"], {}) == 0, capsys.readouterr().err[-2000:]
    elif block.lang == "python":
        exec(compile(smoke_python(block.text), block.id(), "exec"), {"__name__": "__doc_example__"})
    elif block.lang == "toml":
        assert block.options.get("file"), f"{block.id()}: a runnable toml block needs file=NAME"
        tomllib.loads(block.text)  # the file is written for the blocks that use it
    else:
        pytest.fail(f"{block.id()}: no runner for ```{block.lang} blocks")


def test_every_runnable_toml_file_is_used() -> None:
    unused = []
    for block in RUNNABLE:
        name = block.options.get("file")
        if block.lang == "toml" and name:
            users = [b for b in _blocks(block.doc) if b.lang != "toml" and b.runnable and name in b.text]
            if not users:
                unused.append(block.id())
    assert not unused, f"runnable toml blocks no runnable block uses: {unused}"


def _code(source: str) -> str:
    """A module's code without docstrings and `from __future__` (as the guide shows it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    return ast.unparse(tree)


def test_policy_guide_shows_the_tested_example() -> None:
    """The guide's policy file is examples/spf_policy/spf_policy.py (the plugin the suite installs)."""
    guide = next(b for b in RUNNABLE if b.options.get("file") == "spf_policy.py")
    example = (ROOT / "examples" / "spf_policy" / "spf_policy.py").read_text()
    assert _code(guide.text) == _code(example), "docs/writing-a-policy.md and examples/spf_policy/ differ"


def test_some_examples_run() -> None:
    """The marker is in use where the docs show commands (a typo in it would skip everything)."""
    marked = {b.doc.name for b in RUNNABLE}
    for name in ("README.md", "cli.md", "writing-a-policy.md", "simulator.md"):
        assert name in marked, f"{name} has no runnable example"


# ---------------------------------------------------------------------------------------------
# Every `schedsim <command> --flag` the docs mention is a flag of that command.

SCHEDSIM_CALL = re.compile(r"(?<![\w./-])schedsim((?:\s+[a-z][\w-]*)+(?:\s+(?:[^`\n|#]*))?)")


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub)command's parser, keyed by its command words."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        out[words] = parser
        for action in parser._actions:
            if isinstance(action.choices, dict):
                for name, child in action.choices.items():
                    if isinstance(child, argparse.ArgumentParser):
                        walk(child, (*words, name))

    walk(build_parser(), ())
    return out


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _mentions(doc: Path) -> list[str]:
    """Code a page shows: inline spans outside fences, and fenced lines (continuations joined)."""
    prose, fenced = [], False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose.append(line)
    spans = re.findall(r"`([^`\n]+)`", "\n".join(prose))
    lines = [line for b in _blocks(doc) for line in re.sub(r"\\\n\s*", " ", b.text).splitlines()]
    return spans + lines


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_mentioned_flags_exist(doc: Path) -> None:
    parsers = _parsers()
    wrong = []
    for code in _mentions(doc):
        for match in SCHEDSIM_CALL.finditer(code):
            words = match.group(1).split()
            command: tuple[str, ...] = ()
            while words and (*command, words[0]) in parsers:
                command = (*command, words.pop(0))
            if not command:
                continue
            known = _options(parsers[command])
            for word in words:
                flag = word.partition("=")[0].strip("[]()|,.;")
                if flag.startswith("--") and len(flag) > 2 and flag not in known:
                    wrong.append(f"schedsim {' '.join(command)} {flag}")
    assert not wrong, f"{_doc_id(doc)} shows flags the commands do not have: {sorted(set(wrong))}"


# ---------------------------------------------------------------------------------------------
# Reference, not history: nothing about how the code came to be, nothing outside the repository.

HISTORY = {
    "a folder outside the repository": re.compile(r"\bshared/"),
    "an issue reference": re.compile(r"\bissues?\b", re.I),
    "a numbered work period": re.compile(
        r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)|"
        r"this|that|last|previous|next)\s+(?:session|period|round|sprint)\b|\b(?:session|period)\s+\d+",
        re.I,
    ),
    "a development story": re.compile(
        r"\b(?:was reverted|reverted|tried and|we tried|used to be|before the \w+ work)\b", re.I
    ),
}
# the word "session" where the code means one: a multi-turn workload's users, an engine feature
SESSION_TERMS = re.compile(
    r"session_id|multi-turn session|session classes|session radix cache|resumable sessions|"
    r"gptSessionBenchmark|Session ID|session-affinity|a session's requests|new sessions",
    re.I,
)


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_docs_describe_the_code_not_its_history(doc: Path) -> None:
    text = doc.read_text()
    found = [f"{what}: {m.group(0)!r}" for what, rx in HISTORY.items() for m in rx.finditer(text)]
    stray = re.sub(SESSION_TERMS, "", text)
    found += [
        f"the word 'session': {m.group(0)!r}"
        for m in re.finditer(r".{0,30}\bsessions?\b.{0,30}", stray, re.I)
    ]
    assert not found, f"{_doc_id(doc)}: " + "; ".join(found)


# ---------------------------------------------------------------------------------------------
# README's layout table is the tree.

LAYOUT_ROW = re.compile(r"^\|\s*`([\w/]+/)`\s*\|", re.M)


def _layout_table() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.partition("\n## Layout")[2].partition("\n## ")[0]
    return LAYOUT_ROW.findall(section)


def test_layout_table_names_folders_that_exist() -> None:
    rows = _layout_table()
    assert rows, "README.md has no layout table under '## Layout'"
    missing = [r for r in rows if not (ROOT / r).is_dir()]
    assert not missing, f"README layout names folders that do not exist: {missing}"
    packages = [
        r for r in rows if r.startswith(("sim/", "policies/", "traces/", "backend/")) and r.count("/") > 1
    ]
    not_packages = [r for r in packages if not (ROOT / r / "__init__.py").exists()]
    assert not not_packages, f"README layout names sub-packages without __init__.py: {not_packages}"


def test_layout_table_lists_every_package() -> None:
    rows = set(_layout_table())
    wanted = {"sim/", "policies/", "traces/", "backend/", "tests/", "bench/", "examples/", "notebooks/"}
    wanted |= {f"sim/{p.parent.name}/" for p in (ROOT / "sim").glob("*/__init__.py")}
    wanted |= {f"policies/{p.parent.name}/" for p in (ROOT / "policies").glob("*/__init__.py")}
    assert not wanted - rows, f"README layout table lacks: {sorted(wanted - rows)}"
