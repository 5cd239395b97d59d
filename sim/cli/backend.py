"""The real backend's flags (`--backend real`, `--real-*`), shared by run, compare and validate."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_backend_arguments(parser: argparse.ArgumentParser, with_switch: bool = True) -> None:
    """`--backend sim|real` and the real backend's options (the backend loads only when used)."""
    g = parser.add_argument_group("real backend")
    if with_switch:
        g.add_argument(
            "--backend",
            choices=("sim", "real"),
            default="sim",
            help="sim: simulated time (default); real: run the policy on the real model "
            "(needs the `backend` extra: torch and Triton)",
        )
    g.add_argument(
        "--real-model",
        default="tiny",
        help="backend model: a preset (tiny, mini, small, llama-1b), a config.json or a "
        "checkpoint folder with safetensors",
    )
    g.add_argument(
        "--real-ops",
        choices=("auto", "torch", "triton"),
        default="auto",
        help="kernels: auto = Triton on CUDA, torch references on a CPU",
    )
    g.add_argument("--real-device", choices=("auto", "cpu", "cuda"), default="auto")
    g.add_argument(
        "--real-dtype",
        choices=("fp32", "bf16", "fp16"),
        default=None,
        help="model and KV-cache dtype (default: bf16 on CUDA, fp32 on a CPU)",
    )
    g.add_argument(
        "--real-worker-thread",
        action="store_true",
        help="CPU: run the model on a worker thread so scheduling overlaps it",
    )
    g.add_argument("--real-seed", type=int, default=0, help="seed of the random weights")
    g.add_argument(
        "--full-trace",
        action="store_true",
        help="replay the whole trace on the real backend (default: its first 32 requests unless "
        "--max-requests says otherwise)",
    )


def announce(line: str) -> None:
    """Print one line about the run on stderr (kept apart from the summary on stdout)."""
    print(line, file=sys.stderr)


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """ExecutorConfig options from the parsed `add_backend_arguments` flags."""
    return {
        "model": args.real_model,
        "ops": args.real_ops,
        "device": args.real_device,
        "cpu_worker_thread": args.real_worker_thread,
        "seed": args.real_seed,
        "dtype": args.real_dtype,
    }
