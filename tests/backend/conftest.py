"""Backend tests: run Triton kernels in the CPU interpreter unless a GPU is present."""

import os

try:
    import torch

    # Tiny shapes gain nothing from intra-op threads, and on a shared 2-core box they spin.
    torch.set_num_threads(1)
    if not torch.cuda.is_available():
        # Must be set before any @triton.jit kernel module is imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # torch missing: every backend test module skips itself
    pass
