"""Writes the TensorRT-LLM conformance scenarios: one base scenario (or two) per rule of TensorRT-LLM's
schedulers and KV cache manager that a simpler model gets wrong, each also under every capacity
policy x chunking mode.

    python tests/support/trtllm_scenarios.py      # -> tests/conformance/trtllm/scenarios/

The golden step logs next to them (golden/) were recorded with the reference runner that drives
TensorRT-LLM's own PyCapacityScheduler / PyMicroBatchScheduler (commit 002f3cc) inside an emulation
of PyExecutor's loop and the C++ KV cache manager; see golden/README.md. Block size 4 throughout so
block boundaries are easy to read off; F(k, n) is the first n tokens of prompt family k, U(k, n)
tokens only request k has.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1] / "conformance" / "trtllm"
POLICIES = ("max-requests", "guaranteed-no-evict", "static-batch", "max-utilization")
CHUNKINGS: tuple[str | None, ...] = (None, "first-come-first-served", "equal-progress", "force-chunk")
SHORT = {None: "nochunk", "first-come-first-served": "fcfs", "equal-progress": "ep", "force-chunk": "force"}


def F(family: int, n: int) -> list[int]:
    """The first n tokens of a prompt family (shared prefixes)."""
    return [200 * family + i for i in range(1, n + 1)]


def U(k: int, n: int) -> list[int]:
    """n tokens only request k has."""
    return [30000 + 250 * k + i for i in range(1, n + 1)]


def cfg(**kw: Any) -> dict[str, Any]:
    """A small configuration: block size 4, a 12-block pool, max_seq_len 40."""
    base: dict[str, Any] = {
        "block_size": 4,
        "num_blocks": 12,
        "max_batch_size": 4,
        "max_num_tokens": 64,
        "chunking": None,
        "chunk_unit_size": 4,
        "enable_block_reuse": True,
        "prefix_aware": True,
        "two_step_lookahead": False,
        "max_input_len": 30,
        "max_seq_len": 40,
    }
    base.update(kw)
    return base


def req(rid: str, step: int, prompt: list[int], new: int) -> dict[str, Any]:
    """One request entry."""
    return {"id": rid, "arrival_step": step, "prompt": prompt, "max_new_tokens": new}


def scenario(
    name: str, policy: str, cause: str, config: dict[str, Any], requests: list[dict[str, Any]], num_steps: int
) -> dict[str, Any]:
    """A base scenario; `cause` says what its golden log pins."""
    return {
        "name": name,
        "policy": policy,
        "cause": cause,
        "config": config,
        "requests": requests,
        "num_steps": num_steps,
    }


BASES = [
    # 1: the first pass takes only generations; started contexts wait in the second pass
    scenario(
        "c1_wedge_started_context_behind_new_one",
        "guaranteed-no-evict",
        "1 (wedge): y is prefix-skipped while s (same first block) runs, l starts chunking; from step 1 "
        "the second pass is [y, l] and y's blocks to completion never fit while l holds its prompt: "
        "TensorRT-LLM wedges once s finishes",
        cfg(num_blocks=13, max_num_tokens=8, chunking="first-come-first-served"),
        [req("s", 0, F(1, 4), 5), req("y", 0, F(1, 4) + U(1, 4), 32), req("l", 0, U(2, 24), 3)],
        44,
    ),
    scenario(
        "c1_stall_started_context_behind_new_one",
        "guaranteed-no-evict",
        "1 (stall): as the wedge with a pool of 18: l waits behind y until s finishes and y fits",
        cfg(num_blocks=18, max_num_tokens=8, chunking="first-come-first-served"),
        [req("s", 0, F(1, 4), 5), req("y", 0, F(1, 4) + U(1, 4), 32), req("l", 0, U(2, 24), 3)],
        50,
    ),
    scenario(
        "c1_static_started_context_waits_for_generations",
        "static-batch",
        "1 (static batch): g and l start together; while g generates the second pass is skipped, so "
        "the started context l waits until g finishes",
        cfg(
            num_blocks=20,
            max_num_tokens=8,
            chunking="first-come-first-served",
            max_seq_len=60,
            max_input_len=40,
        ),
        [req("g", 0, U(3, 4), 6), req("l", 0, U(4, 28), 2)],
        24,
    ),
    # 2: a context's blocks are stored once its whole prompt is computed
    scenario(
        "c2_duplicate_skipped_until_prompt_complete",
        "guaranteed-no-evict",
        "2: d shares p's first 8 tokens; p's blocks are stored only when its prompt is complete, so d's "
        "first new block stays p's block 0 (the one p contributes) and d is skipped until then, and "
        "reuses 8 tokens after",
        cfg(num_blocks=20, max_num_tokens=12, chunking="equal-progress", max_seq_len=60, max_input_len=40),
        [req("p", 0, U(5, 36), 2), req("d", 1, U(5, 8) + U(6, 4), 2)],
        16,
    ),
    scenario(
        "c2_unfinished_prompt_not_reused",
        "guaranteed-no-evict",
        "2 (prefix-aware off): d arrives while p is mid-prompt: nothing of p is stored, d starts at 0",
        cfg(
            num_blocks=20,
            max_num_tokens=12,
            chunking="equal-progress",
            max_seq_len=60,
            max_input_len=40,
            prefix_aware=False,
        ),
        [req("p", 0, U(7, 28), 2), req("d", 1, U(7, 12) + U(8, 4), 2)],
        16,
    ),
    # 3: at most max_batch_size requests are active; later arrivals wait unseen
    scenario(
        "c3_executor_queue_holds_later_arrivals",
        "guaranteed-no-evict",
        "3: max_batch_size 2; q and r arrive while a runs: only q becomes active (r waits in the "
        "executor queue, invisible to the schedulers) and q is prefix-skipped behind a, so a's last "
        "chunk runs alone although r would fit beside it",
        cfg(
            num_blocks=20,
            max_batch_size=2,
            max_num_tokens=8,
            chunking="first-come-first-served",
            max_seq_len=60,
            max_input_len=40,
        ),
        [req("a", 0, U(9, 12), 2), req("q", 1, U(9, 8) + U(10, 4), 2), req("r", 1, U(11, 4), 2)],
        20,
    ),
    # 4: a paused request's partial last block is stored and reused exactly
    scenario(
        "c4_readmission_recomputes_one_token",
        "max-utilization",
        "4: two-step look-ahead on a pool of 9; the last started request b pauses itself, its release "
        "stores every block (the partial last one too), and re-admission at the next step reuses an "
        "exact match of it: b recomputes 1 token of 16",
        cfg(num_blocks=9, max_num_tokens=40, two_step_lookahead=True, max_seq_len=32, max_input_len=24),
        [req("a", 0, U(12, 9), 19), req("b", 0, U(13, 9), 19)],
        44,
    ),
    scenario(
        "c4_pause_truncates_and_reuses_the_kept_prefix",
        "max-utilization",
        "4 + LlmRequest::pause: max_input_len 14 truncates the paused request's tokens; the blocks "
        "stored before the cut still cover 13 of them (the last one partially, copied)",
        cfg(num_blocks=10, max_num_tokens=40, max_input_len=14, max_seq_len=40),
        [req("a", 0, U(14, 9), 22), req("b", 0, U(15, 9), 22)],
        60,
    ),
    # 5: one block per key; eviction frees the whole subtree
    scenario(
        "c5_duplicate_blocks_not_retained",
        "guaranteed-no-evict",
        "5 (prefix-aware off): a and b compute the same prompt together; the tree keeps a's blocks "
        "only; c evicts them from the free queue's front; d (the same prompt) finds nothing",
        cfg(num_blocks=10, prefix_aware=False, max_num_tokens=40),
        [
            req("a", 0, U(16, 10), 2),
            req("b", 0, U(16, 10), 2),
            req("c", 3, U(17, 28), 2),
            req("d", 4, U(16, 10), 2),
        ],
        16,
    ),
    scenario(
        "c5_evicted_parent_takes_its_children",
        "guaranteed-no-evict",
        "5 (prefix-aware off): p and q compute the same first 8 tokens together; p finishes first and "
        "its blocks are stored, q's last blocks are stored below them later; f's allocation evicts p's "
        "second block from the free queue's front and q's blocks below it leave the tree with it; s "
        "stores p's prefix again, yet r (q's prompt) reuses only those 8 tokens",
        cfg(num_blocks=10, max_num_tokens=40, prefix_aware=False),
        [
            req("p", 0, U(18, 8), 1),
            req("q", 0, U(18, 8) + U(19, 8), 3),
            req("f", 3, U(20, 20), 1),
            req("s", 5, U(18, 8), 1),
            req("r", 7, U(18, 8) + U(19, 8), 1),
        ],
        14,
    ),
    # 6: the reuse estimate of a fully cached block-aligned prompt credits every full block
    scenario(
        "c6_cached_aligned_prompt_costs_one_token",
        "guaranteed-no-evict",
        "6: b's 8-token prompt is cached: the estimate credits both blocks, b costs max(1, 0) = 1 token "
        "and c fits the 9-token budget beside it; addSequence reuses 7 and b computes 1",
        cfg(num_blocks=12, max_num_tokens=9, max_input_len=9),
        [req("a", 0, U(21, 8), 2), req("b", 3, U(21, 8), 2), req("c", 3, U(22, 8), 2)],
        10,
    ),
    scenario(
        "c6_over_admission_fails_in_add_sequence",
        "max-utilization",
        "6 (TensorRT-LLM fails): the pool is exhausted by running requests; b's aligned prompt is held "
        "by a, so getNeededBlocksOneStep needs 0 and b is admitted, but addSequence must copy the "
        "partially matched last block into a fresh one: no free block",
        cfg(num_blocks=9, max_num_tokens=40, max_seq_len=36),
        [req("a", 0, U(23, 8), 24), req("z", 0, U(24, 12), 16), req("b", 5, U(23, 8), 4)],
        46,
    ),
    scenario(
        "c6_token_budget_cannot_be_trimmed",
        "guaranteed-no-evict",
        "6 (TensorRT-LLM fails): chunked, max_num_tokens 4: b's cached aligned prompt is charged 0 "
        "tokens and c takes the 4; b computes 1 and neither chunk can shrink below one block: the "
        "forward pass needs 5 > 4 tokens after fit_token_budget",
        cfg(num_blocks=12, max_num_tokens=4, chunking="first-come-first-served"),
        [req("a", 0, U(25, 8), 2), req("b", 4, U(25, 8), 2), req("c", 4, U(26, 6), 2)],
        12,
    ),
    # 7: a contributed block is registered only once its request is admitted
    scenario(
        "c7_retry_after_pause_does_not_skip_itself",
        "max-utilization",
        "7: x (a's first block) is skipped at step 0; at step 1 x does not fit, g is paused and x is "
        "retried: x registered nothing, so it is admitted (the Python port at 002f3cc registers at "
        "check time and x would skip itself)",
        cfg(num_blocks=10, max_num_tokens=40),
        [req("a", 0, F(2, 4), 12), req("x", 0, F(2, 4) + U(27, 24), 4), req("g", 0, U(28, 12), 16)],
        34,
    ),
    # 8: max-requests has no KV cache manager
    scenario(
        "c8_max_requests_never_reuses",
        "max-requests",
        "8: no KV cache manager: b starts at 0 although a computed the same prefix",
        cfg(num_blocks=12, max_num_tokens=40),
        [req("a", 0, U(29, 12), 3), req("b", 2, U(29, 12) + U(30, 4), 3)],
        10,
    ),
    scenario(
        "c8_max_requests_never_pauses",
        "max-requests",
        "8: four requests needing 4 x 10 blocks of a 12-block pool all run to completion, never paused",
        cfg(num_blocks=12, max_num_tokens=64),
        [req(f"r{i}", 0, U(31 + i, 12), 26) for i in range(4)],
        106,
    ),
    # extras
    scenario(
        "x9_partial_block_copied",
        "guaranteed-no-evict",
        "extra (partial reuse): b shares 7 tokens with a's stored prompt: one full block and 3 tokens "
        "of the next, copied into a fresh block (a still holds it); b starts at 7",
        cfg(num_blocks=12, max_num_tokens=40),
        [req("a", 0, U(35, 12), 6), req("b", 2, U(35, 7) + U(36, 5), 2)],
        10,
    ),
    scenario(
        "x10_force_chunk_takes_the_remainder",
        "guaranteed-no-evict",
        "extra (force-chunk): no snapshot points on a transformer's KV cache: a chunk is the whole "
        "remainder, capped by max_num_tokens and floored to the unit",
        cfg(num_blocks=20, max_num_tokens=20, chunking="force-chunk", max_seq_len=60, max_input_len=40),
        [req("a", 0, U(37, 34), 2), req("b", 0, U(38, 9), 2)],
        7,
    ),
    scenario(
        "x11_contexts_rebinned_after_reuse",
        "guaranteed-no-evict",
        "extra (batch order): prefix-aware off, equal-progress gives a and b one unit each; addSequence "
        "reuses 11 of a's 12 tokens (taking over p's unreferenced last block), so a's chunk becomes its "
        "last and the batch is re-binned [b, a]",
        cfg(num_blocks=16, max_num_tokens=8, chunking="equal-progress", prefix_aware=False),
        [req("p", 0, U(39, 12), 1), req("a", 3, U(39, 12), 2), req("b", 3, U(40, 12), 2)],
        10,
    ),
    scenario(
        "x12_fit_token_budget_shrinks_a_last_chunk",
        "guaranteed-no-evict",
        "extra (token-budget trim): b's cached aligned prompt is charged 0 and c takes the 8-token "
        "budget; b computes 1, so fit_token_budget shrinks c's chunk to 4 (block-aligned) and the "
        "batch fits",
        cfg(num_blocks=12, max_num_tokens=8, chunking="first-come-first-served"),
        [req("a", 0, U(41, 8), 2), req("b", 4, U(41, 8), 2), req("c", 4, U(42, 10), 2)],
        11,
    ),
]


def variants(base: dict[str, Any]) -> list[dict[str, Any]]:
    """The base under every other policy x chunking mode (without chunking, max_num_tokens is
    raised to max_input_len, as TensorRT-LLM requires). A base's num_steps covers the slowest of them."""
    out = []
    for policy in POLICIES:
        for chunking in CHUNKINGS:
            if policy == base["policy"] and chunking == base["config"]["chunking"]:
                continue
            sc = json.loads(json.dumps(base))
            sc["name"] = f"{base['name']}__{policy}__{SHORT[chunking]}"
            sc["policy"] = policy
            sc["config"]["chunking"] = chunking
            if chunking is None:
                config = sc["config"]
                config["max_num_tokens"] = max(config["max_num_tokens"], config["max_input_len"])
            sc["cause"] = f"variant of {base['name']}: coverage of every policy x chunking"
            out.append(sc)
    return out


def main() -> None:
    """Write every base scenario and its variants."""
    out = HERE / "scenarios"
    out.mkdir(exist_ok=True)
    for stale in out.glob("*.json"):
        stale.unlink()
    n = 0
    for base in BASES:
        for sc in [base, *variants(base)]:
            (out / f"{sc['name']}.json").write_text(json.dumps(sc, indent=1) + "\n")
            n += 1
    print(f"{n} scenarios in {out}")


if __name__ == "__main__":
    main()
