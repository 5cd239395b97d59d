"""vLLM's `StructuredOutputManager` (vllm/v1/structured_output/__init__.py), reduced to what the
scheduler asks of it: which draft tokens a structured request's grammar accepts, and how many
bitmask rows a batch needs.

schedsim has no grammars and no vocabulary. Every structured request shares one grammar that
accepts exactly the token ids below `first_rejected_token` (None: every id), which is enough to
model drafts a grammar cuts short: the conformance driver sets it to the oracle's fake grammar,
the simulated world leaves every draft valid.
"""

from __future__ import annotations

from ..request import Request


def strip_speculative_padding(token_ids: list[int]) -> list[int]:
    """vLLM's strip_speculative_padding: the tokens before the first -1 placeholder."""
    for i, token_id in enumerate(token_ids):
        if token_id < 0:
            return token_ids[:i]
    return token_ids


class StructuredOutputManager:
    """Grammar checks of draft tokens and the bitmask's size, as the V1 scheduler uses them."""

    def __init__(self, num_spec_tokens: int, first_rejected_token: int | None = None) -> None:
        self.num_spec_tokens = num_spec_tokens
        self.first_rejected_token = first_rejected_token

    def validate_tokens(self, request: Request, spec_tokens: list[int]) -> list[int]:
        """The longest prefix of the drafts the request's grammar accepts (all of them without
        structured output; -1 placeholders and what follows them are never accepted)."""
        if not request.structured_output:
            return spec_tokens
        spec_tokens = strip_speculative_padding(spec_tokens)
        limit = self.first_rejected_token
        if limit is None:
            return spec_tokens
        for i, token_id in enumerate(spec_tokens):
            if token_id >= limit:
                return spec_tokens[:i]
        return spec_tokens

    def grammar_bitmask(self, structured_output_request_ids: list[str]) -> int:
        """Rows of the batch's bitmask: one per speculative position plus the bonus token, for
        every structured request (vLLM fills a 1 + num_spec_tokens block per request)."""
        return len(structured_output_request_ids) * (1 + self.num_spec_tokens)
