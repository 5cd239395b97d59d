"""Build the compiled core: `python -m schedsim.accel.build [--check]` (mypyc, then a C compiler).

mypy names modules by their paths, so the package is first staged in its installed layout
(`build/accel/src/schedsim/...`, copies of the repository's package-dir folders); mypyc compiles
the modules of `schedsim.accel.COMPILED_MODULES` from there into one shared library, and the
extensions land in `sim/_compiled/` with a manifest of the sources' hashes (`schedsim.accel`
loads them only while those hashes match). Needs mypy (the `dev` extra) and a C compiler; where
either is missing the build says so and exits 1 (`--soft`: exits 0, and schedsim runs as pure
Python, only slower). `--check` reports whether the current build matches the sources.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import shutil
import sys
import time
from pathlib import Path

from schedsim.accel import (
    COMPILED_DIR,
    COMPILED_MODULES,
    GROUP,
    MANIFEST,
    PACKAGE_DIRS,
    REPO_ROOT,
    check_manifest,
    file_hash,
)

BUILD_DIR = REPO_ROOT / "build" / "accel"
# mypy options: the compiled modules must type-check; imported modules only need to resolve
MYPY_ARGS = [
    "--follow-imports=silent",
    "--ignore-missing-imports",
    "--no-error-summary",
    "--cache-dir",
    str(BUILD_DIR / "mypy_cache"),
]


def stage(dest: Path) -> None:
    """Copy every package's .py files into dest/schedsim/... (the installed layout)."""
    if dest.exists():
        shutil.rmtree(dest)
    for prefix, folder in PACKAGE_DIRS.items():
        src = REPO_ROOT / folder
        target = dest.joinpath(*prefix.split("."))
        nested = {f for p, f in PACKAGE_DIRS.items() if p != prefix and p.startswith(prefix + ".")}
        for path in src.rglob("*.py"):
            rel = path.relative_to(src)
            if rel.parts[0] in nested or "_compiled" in rel.parts or "__pycache__" in rel.parts:
                continue
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out)


def compile_core(src: Path, jobs: int) -> dict[str, Path]:
    """mypyc + build_ext over the staged sources; returns module name -> built extension."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    rel_paths = [str(source_rel(m)) for m in COMPILED_MODULES]
    cwd = os.getcwd()
    os.chdir(src)
    try:
        exts = mypycify(
            MYPY_ARGS + rel_paths,
            opt_level="3",
            debug_level="0",
            group_name=GROUP,
            target_dir=str(BUILD_DIR / "c"),
        )
        dist = Distribution({"name": "schedsim-accel", "ext_modules": exts})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(BUILD_DIR / "lib")
        cmd.build_temp = str(BUILD_DIR / "tmp")
        cmd.parallel = jobs
        dist.run_command("build_ext")
        return {ext.name: Path(cmd.get_ext_fullpath(ext.name)) for ext in exts}
    finally:
        os.chdir(cwd)


def source_rel(module: str) -> Path:
    """The staged path of a module (relative to the stage root)."""
    parts = module.split(".")
    return Path(*parts).with_suffix(".py")


def install_build(built: dict[str, Path], staged: Path) -> dict:
    """Copy the extensions into sim/_compiled/ and write the manifest.

    The hashes are the staged copies' (what was compiled), so a source edited during the build
    leaves the build stale instead of passing for it.
    """
    if COMPILED_DIR.exists():
        shutil.rmtree(COMPILED_DIR)
    COMPILED_DIR.mkdir(parents=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    manifest: dict = {
        "ext_suffix": suffix,
        "python": sys.version.split()[0],
        "modules": {},
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for name, path in built.items():
        dest = (
            COMPILED_DIR / path.name
            if name.startswith(GROUP)
            else COMPILED_DIR.joinpath(*name.split(".")[:-1], path.name)
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        rel = str(dest.relative_to(COMPILED_DIR))
        if name in COMPILED_MODULES:
            manifest["modules"][name] = {"so": rel, "sha256": file_hash(staged / source_rel(name))}
        else:
            manifest["group"] = {"name": name, "so": rel}
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Build (or --check) the compiled core."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether the build is current")
    ap.add_argument(
        "--if-stale",
        action="store_true",
        help="build only when the sources changed since the last build (make's default)",
    )
    ap.add_argument("--soft", action="store_true", help="exit 0 when mypy or a compiler is missing")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--stage",
        metavar="DIR",
        type=Path,
        help="only copy the sources into DIR in the installed layout (for tools that "
        "read packages from disk: import-linter, mypy) and exit",
    )
    args = ap.parse_args(argv)
    if args.stage is not None:
        stage(args.stage)
        return 0
    current = MANIFEST.exists() and bool(check_manifest(json.loads(MANIFEST.read_text()))[0])
    if args.check or (args.if_stale and current):
        print("compiled core:", "up to date" if current else "missing or stale")
        return 0 if current or args.if_stale else 1
    t0 = time.perf_counter()
    try:
        stage(BUILD_DIR / "src")
        built = compile_core(BUILD_DIR / "src", args.jobs)
    except (Exception, SystemExit) as e:  # no mypy, a type error, no C compiler: say which
        print(f"schedsim.accel.build: the compiled core was not built: {e!r}", file=sys.stderr)
        return 0 if args.soft else 1
    manifest = install_build(built, BUILD_DIR / "src")
    print(
        f"compiled core: {len(manifest['modules'])} modules in {time.perf_counter() - t0:.0f} s "
        f"-> {COMPILED_DIR.relative_to(REPO_ROOT)}/"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
