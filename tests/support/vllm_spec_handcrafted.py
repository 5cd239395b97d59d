"""Hand-written scenarios of the oracle's extended contract (speculative decoding, structured
output), one per vLLM 0.33.0 behaviour; `docs/policies-vllm.md` maps each to vLLM's code.

    python tests/support/vllm_spec_handcrafted.py OUTDIR   -> OUTDIR/<name>.json, OUTDIR/INDEX.md

The golden logs next to them (`<name>.expected.jsonl`) were recorded from vLLM 0.33.0's real
scheduler (the oracle harness, in batch mode); the `CRASH` scenarios are ones vLLM itself
fails on (an AssertionError, oracle exit 1), recorded as `<name>.expected.err`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def req(
    rid: str,
    prompt: list[int],
    max_tokens: int,
    arrival: int = 0,
    priority: int = 0,
    eos: int | None = None,
    **extra: object,
) -> dict:
    """One scenario request (extra: accept, structured, grammar_delay, valid_drafts)."""
    d = {
        "id": rid,
        "arrival_step": arrival,
        "prompt_token_ids": list(prompt),
        "max_tokens": max_tokens,
        "priority": priority,
        "eos_after": eos,
    }
    d.update(extra)
    return d


def cfg(**kw: object) -> dict:
    """The oracle's config with overrides (max_model_len 256)."""
    base = {
        "block_size": 16,
        "num_gpu_blocks": 40,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 128,
        "max_model_len": 256,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "long_prefill_token_threshold": 0,
        "scheduling_policy": "fcfs",
    }
    base.update(kw)
    return base


SC: dict[str, tuple[dict, str]] = {}
POLS = {"vllm": "vllm", "vllm-async": "async"}


def add(
    name: str,
    policy: str,
    config: dict,
    requests: list[dict],
    num_steps: int,
    pins: str,
    aborts: tuple | list = (),
) -> None:
    """Register a scenario and the behaviour it pins."""
    SC[name] = (
        {
            "policy": policy,
            "config": config,
            "requests": requests,
            "aborts": list(aborts),
            "num_steps": num_steps,
        },
        pins,
    )


# ---------------------------------------------------------------- 1. draft_model budget slot
for pol, m in (("vllm", "draft_model"), ("vllm", "ngram"), ("vllm-async", "draft_model")):
    add(
        f"slot_{m}_{POLS[pol]}",
        pol,
        cfg(max_num_batched_tokens=10, num_spec_tokens=1, spec_method=m),
        [req(f"r{i}", [10 + i] * 3, 8) for i in range(4)],
        9,
        f"{m}: "
        + (
            "every scheduled request costs num_new+1 of the input budget (max_num_new_slots_for_drafting=1): "
            "step 0 admits r0 3, r1 3, r2 only 1 (min(token_budget, input_budget-1)) and r3 waits "
            "(input_budget <= 1 stops the scan); decodes of 2 (1+1 draft) fit 3 per step, not 4"
            if m == "draft_model"
            else "no extra slot: step 0 admits r0 3, r1 3, r2 3, r3 1 and 4 decodes of 1+1 fit the "
            "budget of 10"
        ),
    )
    add(
        f"slot_decodes_{m}_{POLS[pol]}",
        pol,
        cfg(max_num_batched_tokens=12, num_spec_tokens=2, spec_method=m, max_num_seqs=6),
        [req(f"d{i}", [20 + i] * 2, 10, arrival=i) for i in range(5)],
        16,
        f"{m}: steady decodes of 1+2 tokens; "
        + (
            "each costs 4 of the budget of 12 so only 3 run per step; the "
            "4th gets min(budget, input-1) = a shortened chunk of drafts"
            if m == "draft_model"
            else "4 decodes of 3 fit the budget of 12"
        ),
    )

# priority preemption of an already-scheduled victim gives back num_new + draft slot
for pol in ("vllm", "vllm-async"):
    add(
        f"slot_priority_victim_restore_{POLS[pol]}",
        pol,
        cfg(
            scheduling_policy="priority",
            block_size=4,
            num_gpu_blocks=10,
            max_model_len=24,
            max_num_batched_tokens=8,
            num_spec_tokens=1,
            max_num_seqs=4,
            enable_prefix_caching=False,
        ),
        [
            req("L", [5] * 2, 20, priority=2),
            req("H1", [6] * 2, 20, arrival=1, priority=0),
            req("H2", [7] * 20, 4, arrival=2, priority=1),
        ],
        30,
        "priority + draft_model under KV pressure: at step 6 L (already scheduled, 2 tokens) is the "
        "victim of "
        "H1's allocation; its num_new + 1 (draft slot) go back to the input budget (input_budget += "
        "restored + "
        "draft_slots), so H2's chunk is 4, not 3",
    )

# draft_model reserves k lookahead KV slots in allocate_slots (ngram does not)
for pol, m in (("vllm", "draft_model"), ("vllm", "ngram"), ("vllm-async", "draft_model")):
    add(
        f"lookahead_kv_{m}_{POLS[pol]}",
        pol,
        cfg(block_size=4, num_gpu_blocks=10, max_model_len=36, num_spec_tokens=2, spec_method=m),
        [req("a", [6] * 10, 22), req("b", [7] * 10, 22, arrival=1)],
        40,
        f"{m}: KV pressure; "
        + (
            "every allocate_slots reserves k=2 lookahead slots past the scheduled tokens "
            "(capped at max_model_len), so the pool runs out and b is preempted earlier "
            "than with ngram"
            if m == "draft_model"
            else "no lookahead slots: the same requests are preempted later than with draft_model"
        ),
    )

# ---------------------------------------------------------------- 2. padding of 1-token-left admissions
P9 = [7] * 9
for pol in ("vllm", "vllm-async"):
    add(
        f"pad_prefix_hit_and_1tok_{POLS[pol]}",
        pol,
        cfg(block_size=4, num_spec_tokens=2, max_model_len=64, num_gpu_blocks=40),
        [
            req("a", P9, 3),
            req("run", [9] * 5, 20),
            req("b", P9, 4, arrival=5),
            req("one", [11], 4, arrival=6),
            req("solo", [12], 3, arrival=20),
        ],
        26,
        "a waiting request with one token left (b: prefix hit of 8 of 9 tokens; one: 1-token prompt) is "
        "admitted "
        "padded to 1+k=3 with k -1 drafts (spec 2, accepted 0: nothing verifiable) when a running "
        "request was "
        "scheduled; solo (1-token prompt, nothing running, num_computed 0) is admitted unpadded with 1",
    )
for pol, m in (("vllm", "draft_model"), ("vllm", "ngram"), ("vllm-async", "draft_model")):
    add(
        f"pad_nofit_stops_scan_{m}_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3, spec_method=m, max_num_batched_tokens=9, max_num_seqs=4),
        [req("run", [9] * 8, 14), req("w1", [11], 3, arrival=3), req("w2", [12] * 20, 3, arrival=3)],
        14,
        f"{m}: w1 (1-token prompt) needs 1+k=4 "
        + (
            "but min(token_budget 5, input_budget 4 - 1) = 3 is left: the waiting scan stops at w1 (no "
            "unpadded "
            "fallback) and w2 behind it, which would fit a chunk, is not admitted until run finishes"
            if m == "draft_model"
            else "and 5 are left (no draft slot): w1 is padded to 4 and w2 gets a 1-token chunk"
        ),
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"pad_mid_prefill_exception_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=2, max_num_batched_tokens=16, block_size=4, max_model_len=64, num_gpu_blocks=40),
        [
            req("long", [5] * 40, 4),
            req("w1", [11], 4, arrival=1),
            req("w2", [12], 4, arrival=3),
            req("w3", [13], 3, arrival=4),
        ],
        14,
        "no padding while a running request scheduled in the same step continues a chunked prefill "
        "(prefill_scheduled, from is_prefill_chunk set by the previous schedule, so the final chunk "
        "counts too): "
        "w1 is admitted with 1 token next to long's final chunk; w2/w3 arrive when long decodes and are "
        "padded to 3",
    )
    add(
        f"pad_mid_prefill_exception_thr_{POLS[pol]}",
        pol,
        cfg(
            num_spec_tokens=2,
            max_num_batched_tokens=16,
            long_prefill_token_threshold=8,
            block_size=4,
            max_model_len=64,
            num_gpu_blocks=40,
        ),
        [
            req("long", [5] * 40, 4),
            req("w1", [11], 4, arrival=1),
            req("w2", [12], 4, arrival=4),
            req("w3", [13], 3, arrival=6),
        ],
        16,
        "threshold 8 (>= 1+k) chunks long's prefill over 5 steps: w1 (step 1, non-final chunk running) "
        "and w2 "
        "(step 4, final chunk) are admitted unpadded with 1 token; w3 (step 6, long decoding) is padded",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"pad_near_max_model_len_{POLS[pol]}",
        pol,
        cfg(block_size=4, num_gpu_blocks=24, max_model_len=32, num_spec_tokens=3),
        [
            req("a", [8] * 29, 2),
            req("run", [9] * 3, 20),
            req("b", [8] * 29, 3, arrival=4),
            req("c", [10] * 5, 3, arrival=4),
        ],
        16,
        "padding needs num_computed + 1 + k + 1 <= max_model_len: b (prefix hit 28 of 29, 28+5 > 32) is "
        "admitted with 1 token, unpadded, and the scan goes on to admit c",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"pad_resumed_prefix_hit_{POLS[pol]}",
        pol,
        cfg(block_size=4, num_gpu_blocks=9, max_model_len=28, num_spec_tokens=2, max_num_batched_tokens=32),
        [req("big", [5] * 8, 12, accept=[2]), req("a", [6] * 4, 10, arrival=3, accept=[0])],
        20,
        "a (4-token prompt) is preempted after one output token; its full prompt block stays cached, so on "
        "resume the prefix hit leaves exactly one token (5 - 4) and the resumed request is padded to 1+k=3 "
        "with -1 drafts like a new admission",
    )

# ---------------------------------------------------------------- 3. the threshold caps decode + draft
for pol, m in (("vllm", "draft_model"), ("vllm", "ngram"), ("vllm-async", "draft_model")):
    add(
        f"threshold_caps_spec_{m}_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3, spec_method=m, long_prefill_token_threshold=2, enable_prefix_caching=False),
        [req("a", [9] * 5, 12), req("b", [8] * 6, 4)],
        12,
        "long_prefill_token_threshold=2 < 1+k caps decode+draft steps to 2 (1 draft) while 2 requests are "
        "eligible; once b finished a is alone (exempt) and schedules 1+3",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"threshold_caps_spec_waiting_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=2, long_prefill_token_threshold=2, enable_prefix_caching=False, max_num_seqs=1),
        [req("a", [9] * 3, 8), req("b", [8] * 4, 3)],
        20,
        "the threshold counts waiting requests: with one seat, a decodes alone but b waits, so a's "
        "decode+draft "
        "is capped at 2 until b is admitted after a finishes",
    )

# ---------------------------------------------------------------- 4. async spec specifics (and sync twins)
for pol in ("vllm", "vllm-async"):
    add(
        f"accept_patterns_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3, block_size=4, max_model_len=64, num_gpu_blocks=40),
        [
            req("all", [5] * 6, 30, accept=[3]),
            req("none", [6] * 6, 30, accept=[0]),
            req("mix", [7] * 6, 30, accept=[2, 0, 3, 1]),
        ],
        24,
        "accept cycles per verification; "
        + (
            "sync: scheduled = 1 + drafts (always k here), rejected drafts roll back num_computed_tokens"
            if pol == "vllm"
            else "async: every decode step schedules 1+k placeholder positions whatever the acceptance; "
            "the update "
            "rolls back num_computed_tokens and num_output_placeholders by the rejected count"
        ),
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"rollback_max_model_len_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3, block_size=4, max_model_len=40, num_gpu_blocks=20),
        [req("none", [5] * 10, 30, accept=[0]), req("mix", [6] * 10, 30, accept=[1, 3])],
        40,
        "num_new is capped at max_model_len - num_computed_tokens - 1: near the end the cap cuts drafts; the "
        "cap depends on num_computed_tokens after rollback (async: optimistic + placeholders)",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"rollback_kv_pressure_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3, block_size=4, num_gpu_blocks=14, max_model_len=48, max_num_seqs=4),
        [
            req("a", [5] * 8, 36, accept=[0]),
            req("b", [6] * 8, 36, accept=[0, 1]),
            req("c", [7] * 8, 30, accept=[3], arrival=2),
        ],
        60,
        "KV pressure with mostly rejected drafts: blocks are allocated for num_computed_tokens + num_new + k "
        "lookahead after rollback; when the pool runs out the last running request is preempted",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"maxtokens_skip_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3),
        [
            req("m5all", [5] * 4, 5, accept=[3]),
            req("m5none", [6] * 4, 5, accept=[0]),
            req("m2", [7] * 4, 2, accept=[3]),
            req("m1", [8] * 4, 1),
            req("m3", [9] * 4, 3, accept=[1]),
        ],
        10,
        (
            "async: a running request with placeholders is skipped when num_computed + 2 - placeholders >= "
            "prompt + max_tokens (the in-flight step reaches max_tokens even if every draft is "
            "rejected); m5all is "
            "still scheduled once more (wasted) because the rule assumes rejection; m2 is skipped"
            if pol == "vllm-async"
            else "sync twin: no placeholders, no skip; accepted drafts reaching max_tokens are trimmed"
        ),
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"eos_in_drafts_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3),
        [
            req("e2", [5] * 4, 20, eos=2, accept=[3]),
            req("e4", [6] * 4, 20, eos=4, accept=[3]),
            req("e6", [7] * 4, 20, eos=6, accept=[1, 2]),
            req("e9", [8] * 4, 20, eos=9, accept=[0]),
        ],
        12,
        "EOS at an output index covered by accepted drafts: vLLM appends one by one, stops at EOS, drops "
        "the rest "
        "(num_computed_tokens trimmed); async: the next in-flight output is discarded",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"stale_spec_output_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=2, block_size=4, num_gpu_blocks=9, max_model_len=32, max_num_batched_tokens=32),
        [req("a", [5] * 8, 24, accept=[2]), req("b", [6] * 8, 24, accept=[1, 0, 2], eos=11)],
        50,
        "KV pressure preempts b at step 3 while its step-2 output is in flight (async): that output is "
        "stale -- "
        "its token is still appended, so b later resumes recomputing 8 + 4 = 12 tokens, nothing is "
        "rolled back "
        "(its drafts were all rejected), and b is not resumed before the stale output drained",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"stale_output_finishes_preempted_{POLS[pol]}",
        pol,
        cfg(
            block_size=4,
            num_gpu_blocks=7,
            max_model_len=24,
            max_num_batched_tokens=32,
            max_num_seqs=4,
            num_spec_tokens=2,
        ),
        [req("a", [5] * 3, 20, accept=[2]), req("b", [6] * 4, 20, eos=6, accept=[2])],
        14,
        (
            "async: b is preempted at step 3 while its step-2 output (accepted drafts, EOS at output 6) "
            "is in "
            "flight; that stale output is still appended and finishes b (preempted and finished in the "
            "same step, "
            "tokens past EOS trimmed)"
        )
        if pol == "vllm-async"
        else "sync twin: no output in flight at preemption time",
    )
add(
    "stale_output_max_tokens_async",
    "vllm-async",
    cfg(
        block_size=8,
        num_gpu_blocks=5,
        max_model_len=24,
        max_num_batched_tokens=64,
        max_num_seqs=6,
        num_spec_tokens=3,
    ),
    [
        req("a", [380], 13, eos=12, accept=[1, 2, 1]),
        req("b", [414] + list(range(20, 42)), 1, arrival=1, accept=[4, 4]),
    ],
    10,
    "async: b (max_tokens 1) is skipped at step 2 (its prefill step reaches max_tokens) but is still the "
    "FCFS "
    "victim of a's allocation; its stale prefill output finishes it (length) in the same step",
)
for pol in ("vllm", "vllm-async"):
    add(
        f"abort_inflight_spec_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=2),
        [
            req("a", [5] * 5, 20, accept=[1]),
            req("b", [6] * 5, 20, accept=[2]),
            req("c", [7] * 5, 20),
            req("d", [8] * 5, 6, arrival=5),
            req("e", [9] * 3, 2, accept=[0]),
        ],
        12,
        "aborts: a at step 3 and b at step 6 while running (async: with a spec step in flight, whose "
        "output is "
        "then dropped: no rollback, never in finished); c while waiting (step 0, before its first schedule); "
        "d before it arrives and e after it finished: no-ops",
        aborts=[
            {"id": "a", "step": 3},
            {"id": "b", "step": 6},
            {"id": "c", "step": 0},
            {"id": "d", "step": 2},
            {"id": "e", "step": 8},
        ],
    )
add(
    "budget_cuts_drafts_vllm",
    "vllm",
    cfg(num_spec_tokens=4, spec_method="ngram", max_num_batched_tokens=8),
    [req("a", [5] * 3, 12), req("b", [6] * 3, 12), req("c", [7] * 3, 12)],
    14,
    "sync: the budget cuts scheduled drafts (spec = tokens beyond the known ones), the rest are cleared; "
    "verification only covers the scheduled drafts",
)

# ---------------------------------------------------------------- 5. structured output
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_drafts_{POLS[pol]}",
        pol,
        cfg(num_spec_tokens=3),
        [
            req("s", [5] * 4, 16, structured=True, valid_drafts=[1, 0, 3, 2], accept=[3]),
            req("u", [6] * 4, 16, accept=[3]),
        ],
        12,
        "sync: validate_tokens keeps the longest grammar-valid prefix of the drafts, so s schedules 1+valid "
        "(2,1,4,3 pattern) and u 1+3; grammar rows [s...], deferred false"
        if pol == "vllm"
        else "async: the count never changes (s schedules 1+3), grammar-invalid drafts only become -1 in the "
        "deferred batch (update_draft_token_ids_in_output); accepted <= valid prefix; deferred every "
        "decode step",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_rows_order_{POLS[pol]}",
        pol,
        cfg(max_num_batched_tokens=32),
        [
            req("s1", [5] * 10, 6, structured=True),
            req("u1", [6] * 3, 6),
            req("s2", [7] * 40, 4, structured=True),
            req("s3", [8] * 2, 5, structured=True, arrival=3),
            req("u2", [9] * 2, 5, arrival=3),
        ],
        14,
        "k=0: grammar rows = structured requests of the batch that are not mid-prefill, in "
        "num_scheduled_tokens "
        "order (running queue order, then admissions); s2's prefill chunks have no row"
        + (
            "; async: a batch is deferred when a structured request's previous step is in flight"
            if pol != "vllm"
            else ""
        ),
    )
add(
    "grammar_deferred_pipeline_async",
    "vllm-async",
    cfg(max_num_batched_tokens=16),
    [
        req("s", [5] * 20, 8, structured=True),
        req("u", [6] * 3, 12),
        req("s2", [7] * 3, 3, structured=True, arrival=6),
    ],
    18,
    "async: a batch is deferred exactly when a structured request scheduled as non-prefill-chunk already has "
    "output placeholders (its previous step in flight): s's prefill chunks and its first decode are not "
    "deferred, every later s step is; u alone never defers",
)
add(
    "grammar_rows_skip_finished_async",
    "vllm-async",
    cfg(),
    [
        req("s1", [5] * 4, 10, structured=True, eos=3),
        req("s2", [6] * 4, 10, structured=True),
        req("s3", [7] * 4, 4, structured=True),
    ],
    10,
    "async, deferred batch: the bitmask is computed after update_from_output(s-1), so s1, finished by EOS in "
    "that update, is left out of the rows of step 3's batch although it is scheduled in it; s3 (max_tokens) "
    "is not scheduled in its last in-flight step at all (async skip rule)",
)
add(
    "grammar_rows_skip_finished_spec_async",
    "vllm-async",
    cfg(num_spec_tokens=2),
    [
        req("s1", [5] * 4, 10, structured=True, eos=4, accept=[2]),
        req("s2", [6] * 4, 10, structured=True, valid_drafts=[2, 1], accept=[2]),
        req("u", [7] * 4, 10, eos=3),
    ],
    10,
    "async + k=2: rows of a deferred batch leave out s1, finished by EOS inside accepted drafts in the "
    "previous "
    "update; s2's invalid drafts become -1 before the bitmask",
)
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_delay_keeps_position_{POLS[pol]}",
        pol,
        cfg(max_num_seqs=2),
        [
            req("s", [5] * 4, 4, structured=True, grammar_delay=3),
            req("a", [6] * 4, 12),
            req("c", [7] * 4, 2, arrival=1),
            req("d", [8] * 4, 4, arrival=1),
        ],
        16,
        "a request waiting for its grammar is skipped (popped and put back in place) and requests behind "
        "it are "
        "admitted (a, c); when its grammar is ready (step 3) it keeps its queue position: it gets the "
        "free seat "
        "before d, which arrived later",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_delay_counts_waiting_{POLS[pol]}",
        pol,
        cfg(long_prefill_token_threshold=8, max_num_batched_tokens=64),
        [req("long", [5] * 60, 3), req("s", [6] * 4, 3, structured=True, grammar_delay=4)],
        12,
        "a request waiting for its grammar still counts as waiting: with it, 2 requests are eligible and "
        "long's prefill is capped at long_prefill_token_threshold=8 per step although nothing else can run",
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_ready_preempt_step_{POLS[pol]}",
        pol,
        cfg(
            block_size=4,
            num_gpu_blocks=9,
            max_model_len=32,
            max_num_batched_tokens=32,
            scheduling_policy="priority",
        ),
        [
            req("a", [5] * 8, 24, priority=1),
            req("b", [6] * 8, 24, priority=2),
            req("s", [7] * 2, 3, priority=0, structured=True, grammar_delay=9),
        ],
        30,
        "grammar promotion happens only in the waiting scan: a grammar that completes in a step whose "
        "schedule "
        "preempts (no waiting scan) leaves the request waiting; it is promoted and admitted when a later "
        "scan "
        "reaches it",
    )
add(
    "grammar_delay_priority_async",
    "vllm-async",
    cfg(scheduling_policy="priority", max_num_seqs=2, num_spec_tokens=2),
    [
        req("lo", [5] * 4, 10, priority=2),
        req("s", [6] * 4, 6, priority=0, structured=True, grammar_delay=2),
        req("mid", [7] * 4, 6, priority=1),
        req("late", [8] * 4, 4, priority=1, arrival=3),
    ],
    18,
    "priority queue: the grammar-waiting s is popped, skipped and re-inserted by priority; lower-priority "
    "requests overtake it only while it waits; spec on (k=2) with deferred batches",
)
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_mixed_kv_pressure_{POLS[pol]}",
        pol,
        cfg(block_size=4, num_gpu_blocks=12, max_model_len=40, num_spec_tokens=2, max_num_seqs=4),
        [
            req("s1", [5] * 6, 20, structured=True, valid_drafts=[2, 0, 1], accept=[2, 1]),
            req("u1", [6] * 6, 20, accept=[0, 2]),
            req("s2", [7] * 6, 18, structured=True, grammar_delay=2, valid_drafts=[1], arrival=1),
            req("u2", [8] * 3, 10, arrival=3, eos=5),
        ],
        60,
        "structured + spec + preemption together: grammar rows, deferred batches and drafts across "
        "preempt/resume (a preempted request's drafts are dropped)",
    )

# ---------------------------------------------------------------- 6. more corners of the same rules
for pol, m in (("vllm", "draft_model"), ("vllm", "ngram"), ("vllm-async", "draft_model")):
    add(
        f"slot_min_budget_{m}_{POLS[pol]}",
        pol,
        cfg(max_num_batched_tokens=3, max_num_seqs=3, num_spec_tokens=2, spec_method=m),
        [req("a", [5] * 4, 6, accept=[2]), req("b", [6] * 2, 6, accept=[2])],
        14,
        "max_num_batched_tokens = k + 1, the least vLLM accepts with draft_model: "
        + (
            "one request per step (num_new + 1 slot exhausts the input budget), a's prompt takes 2 per "
            "step and its decodes carry 1 draft, not 2; b runs only once a finished"
            if m == "draft_model"
            else "no slot: a's 4-token prompt takes 3, then 1 next to b's 2-token prompt; a's decodes of "
            "1 + 2 drafts fill the budget of 3, so b decodes only once a finished"
        ),
    )
    add(
        f"chunked_off_slot_{m}_{POLS[pol]}",
        pol,
        cfg(
            enable_chunked_prefill=False,
            max_num_batched_tokens=32,
            max_model_len=32,
            block_size=8,
            num_gpu_blocks=20,
            num_spec_tokens=2,
            spec_method=m,
        ),
        [req("run", [5] * 4, 12, accept=[1]), req("w", [6] * 28, 3, arrival=2)],
        16,
        "chunked prefill off: a waiting prompt that exceeds min(token_budget, input_budget - slot) stops "
        "the scan; "
        + (
            "draft_model: next to run's decode (1+2, costing 4 of the input budget) w's 28 "
            "tokens exceed 32-4-1 = 27, so w waits until run finishes"
            if m == "draft_model"
            else "ngram: 28 <= 32-3 = 29, so w is admitted next to run's decode"
        ),
    )
for pol in ("vllm", "vllm-async"):
    add(
        f"grammar_delay_abort_{POLS[pol]}",
        pol,
        cfg(max_num_seqs=2, num_spec_tokens=1),
        [
            req("s", [5] * 4, 4, structured=True, grammar_delay=4),
            req("a", [6] * 4, 6),
            req("t", [7] * 4, 3, structured=True, grammar_delay=2, arrival=1),
            req("b", [8] * 4, 3, arrival=1),
        ],
        14,
        "a request aborted while it waits for its grammar leaves the queue at once (s, step 2): its grammar "
        "completing later does nothing; t, still compiling, is skipped in place so b takes the free seat, "
        "and t is admitted when a seat frees after its grammar is ready",
        aborts=[{"id": "s", "step": 2}],
    )
add(
    "grammar_delay_priority_vllm",
    "vllm",
    cfg(scheduling_policy="priority", max_num_seqs=2, num_spec_tokens=2),
    [
        req("lo", [5] * 4, 10, priority=2),
        req("s", [6] * 4, 6, priority=0, structured=True, grammar_delay=2),
        req("mid", [7] * 4, 6, priority=1),
        req("late", [8] * 4, 4, priority=1, arrival=3),
    ],
    18,
    "sync twin of grammar_delay_priority_async: the grammar-waiting s is re-inserted by priority and "
    "overtaken only while it waits; its drafts are scheduled as proposed (all grammar-valid)",
)
add(
    "grammar_ngram_threshold_vllm",
    "vllm",
    cfg(num_spec_tokens=3, spec_method="ngram", long_prefill_token_threshold=3, enable_prefix_caching=False),
    [
        req("s", [5] * 6, 12, structured=True, valid_drafts=[3, 1, 0, 2], accept=[3]),
        req("u", [6] * 6, 12, accept=[1, 3]),
    ],
    14,
    "sync, ngram: the grammar cuts s's drafts to their valid prefix before the threshold of 3 cuts "
    "every decode + drafts (so s schedules 1 + min(valid, 2), u 1 + 2) while both are eligible",
)


# ---------------------------------------------------------------- vLLM 0.33.0 crashes (kept apart)
CRASH: dict[str, tuple[dict, str]] = {}
for pol in ("vllm", "vllm-async"):
    CRASH[f"pad_threshold_assert_{POLS[pol]}"] = (
        {
            "policy": pol,
            "config": cfg(
                block_size=4,
                num_spec_tokens=3,
                max_model_len=64,
                num_gpu_blocks=40,
                long_prefill_token_threshold=2,
            ),
            "requests": [req("run", [9] * 5, 20), req("one", [11], 4, arrival=3)],
            "aborts": [],
            "num_steps": 12,
        },
        "0 < long_prefill_token_threshold < 1+k with a padded admission while 2 requests are eligible: the "
        "threshold cuts the padded 1+k tokens and vLLM 0.33.0 fails `assert num_new_tokens == 1 + "
        "self.num_spec_tokens` (scheduler.py, waiting loop): the oracle exits 1 (AssertionError)",
    )


def write(out: Path) -> None:
    """Every scenario as OUTDIR/<name>.json, and OUTDIR/INDEX.md (name: what it pins)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Hand-written scenarios of the extended contract: what each pins", ""]
    for name, (sc, pins) in sorted(SC.items()):
        (out / f"{name}.json").write_text(json.dumps(sc) + "\n")
        lines.append(f"- `{name}`: {pins}")
    lines += ["", "## Scenarios vLLM 0.33.0 itself fails on (`<name>.expected.err`, oracle exit 1)", ""]
    for name, (sc, pins) in sorted(CRASH.items()):
        (out / f"{name}.json").write_text(json.dumps(sc) + "\n")
        lines.append(f"- `{name}`: {pins}")
    lines += [
        "",
        "## Random scenarios",
        "",
        "`<kind>_<seed>.json` (mix, stress, pad, grammar, wide; seeds 0-19): "
        "`python tests/support/vllm_spec_scenarios.py OUTDIR 20 0 all`.",
    ]
    (out / "INDEX.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
