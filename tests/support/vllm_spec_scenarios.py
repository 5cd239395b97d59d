"""Random scenarios of the oracle's extended contract (speculative decoding, structured output).

    python tests/support/vllm_spec_scenarios.py OUTDIR N SEED [KIND] [POLICY]
    KIND: mix (default) | stress | pad | grammar | wide | all  -> OUTDIR/<kind>_<seed>.json

Used for the golden random set in `tests/conformance/vllm_spec/`, for bulk checks against the oracle
and by the hypothesis live diff (`spec_scenario_from_seed`). Every scenario is valid for the oracle, including
two constraints vLLM 0.33.0 enforces at run time: with k > 0 and 0 < long_prefill_token_threshold
< 1 + k a padded admission trips vLLM's assertion, so such scenarios turn prefix caching off and
have no 1-token prompts (the only ways a waiting request has exactly one token left); draft_model
needs max_num_batched_tokens > k and ngram runs only with "vllm". Knobs drawn per scenario: k
0..4, both methods, accept patterns, structured fraction, grammar_delay, valid_drafts, KV
pressure, aborts, priorities, prefix sharing (prompts of n * block_size + 1 tokens, so a hit
leaves one token), eos_after, late arrivals.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def _accept(rng: random.Random, k: int) -> list[int]:
    """An accept pattern: all, none, or a short cycle (values up to k + 1)."""
    kind = rng.random()
    if kind < 0.2:
        return [k]
    if kind < 0.35:
        return [0]
    return [rng.randint(0, k + 1) for _ in range(rng.randint(1, 5))]


def _valid(rng: random.Random, k: int) -> list[int]:
    """A valid_drafts pattern (values above k: every draft valid)."""
    if rng.random() < 0.3:
        return [rng.randint(0, k)]
    return [rng.randint(0, k + 1) for _ in range(rng.randint(1, 5))]  # > k: all valid


def _config(rng: random.Random, policy: str, kind: str) -> dict:
    """A config the oracle accepts, biased to small pools, budgets and thresholds."""
    k = rng.choice([0, 1, 2, 2, 3, 3, 4]) if kind != "grammar" else rng.choice([0, 0, 1, 2, 3])
    method = "draft_model" if policy == "vllm-async" else rng.choice(["draft_model", "ngram"])
    bs = rng.choice([4, 4, 8, 16])
    if kind == "wide":
        bs = rng.choice([8, 16])
        mml = rng.choice([128, 256, 512])
    else:
        mml = rng.choice([24, 32, 48, 64, 96, 128])
    need = -(-mml // bs)
    pressure = kind == "stress" or rng.random() < 0.45
    extra = rng.choice([0, 0, 1, 2, 3, 5]) if pressure else rng.choice([4, 8, 20, 60])
    seqs = rng.choice([1, 2, 3, 4, 6, 8, 16])
    chunked = rng.random() < 0.85
    mnbt = max(
        seqs,
        rng.choice([4, 6, 8, 12, 16, 24, 32, 64, 128] if kind != "stress" else [4, 6, 8, 8, 12, 16, 24, 32]),
    )
    if k > 0 and method == "draft_model":
        mnbt = max(mnbt, k + 1 + rng.choice([0, 0, 1, 3]))
    if not chunked:
        mnbt = max(mnbt, mml)
    thr = rng.choice([0, 0, 0, 2, 3, 4, 6, 8, 16, 30])
    caching = rng.random() < 0.8
    small_thr = k > 0 and 0 < thr < 1 + k
    if small_thr and rng.random() < 0.5:
        thr = 1 + k + rng.choice([0, 1, 4])
        small_thr = False
    if small_thr:
        caching = False  # no prefix hit can leave exactly one token (see module doc)
    cfg = {
        "block_size": bs,
        "num_gpu_blocks": need + 1 + extra,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": mnbt,
        "max_model_len": mml,
        "enable_prefix_caching": caching,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": min(thr, mml),
        "scheduling_policy": rng.choice(
            ["fcfs", "priority"] if kind == "stress" else ["fcfs", "fcfs", "priority"]
        ),
    }
    if k > 0 or rng.random() < 0.5:
        cfg["num_spec_tokens"] = k
        cfg["spec_method"] = method
    return cfg


def _prompts(rng: random.Random, n: int, cfg: dict, no_single: bool, kind: str) -> list[list[int]]:
    """Prompts sharing roots, identical prompts and n * block_size + 1 tokens (one token left)."""
    bs, mml = cfg["block_size"], cfg["max_model_len"]
    maxp = max(2, min(mml - 1, rng.choice([6, 12, 24, 40, 80])))
    roots = [[rng.randrange(3, 700) for _ in range(rng.randint(1, maxp))] for _ in range(3)]
    long_root = [rng.randrange(3, 700) for _ in range(mml)]
    out: list[list[int]] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.2 and out:
            p = list(rng.choice(out))  # identical prompt: full-block hits
        elif kind == "pad" and r < 0.45:
            # n*bs + 1 tokens close to max_model_len: a prefix hit leaves one token but 1 + k
            # padding may not fit under max_model_len
            nb = max(0, (mml - 2 - rng.randint(0, 4)) // bs)
            p = long_root[: nb * bs] + [rng.randrange(3, 700)]
        elif r < 0.35 or (kind == "pad" and r < 0.6):
            root = rng.choice(roots)
            nb = rng.randint(0, max(0, (min(len(root), mml - 2)) // bs))
            p = root[: nb * bs] + [rng.randrange(3, 700)]  # n*bs + 1 tokens
            if kind == "pad" and rng.random() < 0.3:
                p = [rng.randrange(3, 700)]
        elif r < 0.7:
            p = rng.choice(roots) + [rng.randrange(3, 700) for _ in range(rng.randint(0, maxp))]
        else:
            p = [rng.randrange(3, 700) for _ in range(rng.randint(1, maxp))]
        p = p[: mml - 1]
        if no_single and len(p) < 2:
            p = p + [rng.randrange(3, 700)]
        out.append(p)
    return out


def spec_scenario_from_seed(seed: int, kind: str = "mix", policy: str | None = None) -> dict:
    """One random scenario of a kind, fully determined by (kind, seed) and the policy if given."""
    rng = random.Random(f"{kind}:{seed}")
    policy = policy or rng.choice(["vllm", "vllm-async"])
    cfg = _config(rng, policy, kind)
    k = cfg.get("num_spec_tokens", 0)
    no_single = k > 0 and 0 < cfg["long_prefill_token_threshold"] < 1 + k
    mml = cfg["max_model_len"]
    n = rng.randint(1, {"stress": 16, "wide": 28}.get(kind, 9))
    frac = {"grammar": rng.choice([0.5, 0.8, 1.0])}.get(kind, rng.choice([0.0, 0.0, 0.2, 0.5, 1.0]))
    reqs = []
    for i, p in enumerate(_prompts(rng, n, cfg, no_single, kind)):
        mt = rng.randint(1, max(1, min(rng.choice([4, 12, 30, 60]), mml - len(p))))
        r = {
            "id": f"r{i:02d}",
            "arrival_step": rng.choice([0, 0, rng.randint(0, 20)]),
            "prompt_token_ids": p,
            "max_tokens": mt,
            "priority": rng.randint(0, 3),
            "eos_after": rng.choice([None, None, rng.randint(1, mt + 3)]),
        }
        if k > 0 and rng.random() < 0.8:
            r["accept"] = _accept(rng, k)
        if rng.random() < frac:
            r["structured"] = True
            if rng.random() < 0.4:
                r["grammar_delay"] = rng.choice([0, 1, 2, 3, 5, 9])
            if k > 0 and rng.random() < 0.7:
                r["valid_drafts"] = _valid(rng, k)
        reqs.append(r)
    aborts = []
    for r in reqs:
        if rng.random() < 0.12:
            aborts.append({"id": r["id"], "step": rng.randint(0, 40)})
    steps = rng.randint(20, 70) if kind not in ("stress", "wide") else rng.randint(60, 150)
    return {"policy": policy, "config": cfg, "requests": reqs, "aborts": aborts, "num_steps": steps}


KINDS = ("mix", "stress", "pad", "grammar", "wide")


def main(argv: list[str]) -> int:
    """Write N scenarios per kind (seeds SEED..SEED+N-1), the policy drawn unless given."""
    outdir, n, seed = Path(argv[0]), int(argv[1]), int(argv[2])
    kind = argv[3] if len(argv) > 3 else "mix"
    policy = argv[4] if len(argv) > 4 else None
    kinds = KINDS if kind == "all" else (kind,)
    outdir.mkdir(parents=True, exist_ok=True)
    for kd in kinds:
        for s in range(seed, seed + n):
            sc = spec_scenario_from_seed(s, kd, policy)
            (outdir / f"{kd}_{s}.json").write_text(json.dumps(sc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
