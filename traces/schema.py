"""The Workload schema: one row per request, the only thing traces/ hands to anyone.

A Workload is a pandas DataFrame with the required columns below, in this order, followed by
any of the optional ones. Loaders and generators only add an optional column when the source
has it; an absent optional column means its default for every row (`with_defaults` fills them).
`validate_workload` checks every invariant listed here.
"""

from __future__ import annotations

# Required columns, in order, with their pandas dtypes.
REQUIRED_COLUMNS: dict[str, str] = {
    "request_id": "string",  # unique, stable across runs (Arrow-backed strings)
    "arrival_time": "float64",  # seconds from the workload's start (>= 0), non-decreasing;
    # loaders put the file's first request at 0, a window its start
    "prompt_tokens": "int64",  # >= 1
    "output_tokens": "int64",  # >= 1: the model emits EOS after this many tokens
}

# Optional columns, with their dtypes and the value a missing column means.
OPTIONAL_COLUMNS: dict[str, tuple[str, object]] = {
    # tuple of ints at block size attrs[ATTR_PREFIX_BLOCK_SIZE] (Mooncake's convention): entry j
    # identifies tokens [j*B, (j+1)*B) of the prompt, the last entry may cover a partial block
    # (at most ceil(prompt_tokens / B) entries), and two requests share block j exactly when
    # entries 0..j are all equal. None: no prefix information (every block unique). Consumers
    # never read this directly: `block_hashes_at(workload, block_size)` gives one prefix-chained
    # value per full block at the simulator's block size.
    "prompt_block_hashes": ("object", None),
    "session_id": ("string", None),
    "turn": ("Int64", None),  # 0-based turn within the session
    "max_tokens": ("Int64", None),  # None: output_tokens is the cap too
    "structured_output": ("bool", False),
    "priority": ("int64", 0),
    "lora_id": ("Int64", None),
    "request_class": ("string", None),  # generator class name, BurstGPT model, ...
}

# Workload.attrs keys
ATTR_PREFIX_BLOCK_SIZE = "prefix_block_size"  # block size prompt_block_hashes are expressed in
ATTR_SOURCE = "source"  # where the rows came from (file, generator + seed)
ATTR_FORMAT = "format"  # loader that read it: azure, mooncake, burstgpt, ...
ATTR_SKIPPED = "skipped_rows"  # {"count": n, "first": [{line, field, reason}]}
ATTR_FILTERED = "filtered_rows"  # rows left out on request (model/log-type filters)
ATTR_TRANSFORMS = "transforms"  # list of transforms applied, in order
