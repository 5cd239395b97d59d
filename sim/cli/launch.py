"""The `schedsim` script's entry point: the command's imports take most of a second, so they run
under it and a Ctrl-C while they load ends like one during a command (one line, exit 130)."""

from __future__ import annotations

import sys

from schedsim.cli.exit_codes import EXIT_INTERRUPTED


def main() -> int:
    """Import the command line, then run it; Ctrl-C during the import writes nothing."""
    try:
        from schedsim.cli.main import main as run_command  # the heavy imports, interruptible
    except KeyboardInterrupt:
        print("schedsim: interrupted; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run_command()
