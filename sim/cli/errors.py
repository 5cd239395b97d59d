"""How a command ends on bad input or a closed pipe: one line on stderr and a status, never a
traceback. Bad input (a ConfigError, TraceError or OutputFolderError, raised wherever the value
is first known to be wrong) prints `schedsim: error: <where>: <field>: <why> (got <value>)` and
exits 2; a policy that stops where the engine it models itself fails (an `EngineFailure`: a
TensorRT-LLM wedge) prints `schedsim: error: <run>: <engine> itself fails here (<cause>), step
<n>: <what>; nothing written` and exits 4; output piped into a reader that stops early (`| head`)
ends quietly with 141, as a shell tool killed by SIGPIPE does."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import TextIO

from schedsim.cli.exit_codes import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_ENGINE_FAILS
from schedsim.outputs.folder import OutputFolderError
from schedsim.policies import EngineFailure
from schedsim.run.toml_config import ConfigError
from schedsim.traces import TraceError, TraceWarning

USER_ERRORS = (ConfigError, TraceError, OutputFolderError)


def error_line(exc: BaseException | str) -> str:
    """The error (or its text) as the one line the CLI prints."""
    text = " ".join(str(exc).split("\n")).strip() or type(exc).__name__
    return f"schedsim: error: {text}"


def report(exc: BaseException) -> int:
    """Print a user-input error and give the exit status for it."""
    print(error_line(exc), file=sys.stderr)
    return EXIT_BAD_INPUT


def report_engine_failure(exc: EngineFailure) -> int:
    """Print where and why the policy stopped (the run, and the replica of a cluster, named by the
    exception's notes: added innermost first)."""
    where = "".join(f"{note}: " for note in reversed(getattr(exc, "__notes__", ())))  # outermost first
    print(error_line(f"{where}{exc.report()}; nothing written"), file=sys.stderr)
    return EXIT_ENGINE_FAILS


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Warnings about the user's input (skipped trace rows) as `schedsim: warning: ...` lines;
    any other warning as Python shows it, source location included."""
    if issubclass(category, TraceWarning):
        print(f"schedsim: warning: {message}", file=file or sys.stderr)
    else:
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into the closed pipe is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured by a test harness)
        pass
    finally:
        os.close(devnull)


def guarded(command: Callable[[], int]) -> int:
    """Run a command: user-input errors as one line (exit 2), an engine's own failure as one line
    (exit 4), a closed stdout quietly (141).

    stdout is flushed inside the guard: a pipe's buffered output otherwise fails only at exit,
    where nothing can catch it.
    """
    shown, warnings.showwarning = warnings.showwarning, show_warning
    try:
        try:
            status = command()
        except SystemExit:  # argparse's --help and usage errors: their output is flushed here too
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return status
    except USER_ERRORS as exc:
        return report(exc)
    except EngineFailure as exc:
        return report_engine_failure(exc)
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE
    finally:
        warnings.showwarning = shown
