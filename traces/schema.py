"""The Workload schema: one row per request, the only thing traces/ hands to anyone."""

from __future__ import annotations

# Required columns, in order, with their pandas dtypes.
REQUIRED_COLUMNS: dict[str, str] = {
    "request_id": "string",      # unique, stable across runs
    "arrival_time": "float64",   # seconds from the start of the workload, non-decreasing
    "prompt_tokens": "int64",    # >= 1
    "output_tokens": "int64",    # >= 1: the model emits EOS after this many tokens
}

# Optional columns, with their dtypes and the value a missing column means.
OPTIONAL_COLUMNS: dict[str, tuple[str, object]] = {
    # tuple of ints, one per full prompt block of `prefix_block_size` tokens; equal values at the
    # same position (with equal predecessors) mean equal content (prefix sharing). None: unique.
    "prompt_block_hashes": ("object", None),
    "session_id": ("string", None),
    "turn": ("Int64", None),
    "max_tokens": ("Int64", None),        # None: output_tokens is the cap too
    "structured_output": ("bool", False),
    "priority": ("int64", 0),
    "lora_id": ("Int64", None),
    "request_class": ("string", None),
}

# Workload.attrs keys
ATTR_PREFIX_BLOCK_SIZE = "prefix_block_size"  # block size prompt_block_hashes are expressed in
ATTR_SOURCE = "source"                        # where the rows came from (file, generator + seed)
