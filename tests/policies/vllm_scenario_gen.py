"""Random conformance scenarios that stress vLLM's corners (KV pressure, chunking, prefixes, aborts).

Used by the golden-file generator (`python tests/policies/scenario_gen.py OUTDIR N SEED`) and by
the hypothesis tests (`scenario_from_seed`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def _prompts(rng: random.Random, n: int, max_prompt: int) -> list[list[int]]:
    """Prompts drawn from a few shared prefixes so prefix caching has something to hit."""
    prefixes = [[rng.randrange(3, 500) for _ in range(rng.randint(1, max_prompt))] for _ in range(3)]
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.25 and out:
            out.append(list(rng.choice(out)))  # identical to an earlier prompt
            continue
        base = list(rng.choice(prefixes)) if kind < 0.7 else []
        tail = [rng.randrange(3, 500) for _ in range(rng.randint(1, max_prompt))]
        p = (base + tail)[:max_prompt]
        out.append(p or [5])
    return out


def _config(rng: random.Random) -> dict:
    """A config vLLM accepts, biased towards small pools (preemption) and small budgets (chunking)."""
    bs = rng.choice([4, 8, 16, 16])
    mml = rng.choice([32, 48, 64, 96, 128, 200])
    min_blocks = -(-mml // bs) + 1
    nblocks = min_blocks + rng.choice([0, 0, 1, 2, 4, 8, 20, 60])
    seqs = rng.choice([1, 2, 3, 4, 8])
    chunked = rng.random() < 0.8
    mnbt = max(seqs, rng.choice([8, 16, 24, 32, 64, 128]))
    if not chunked:
        mnbt = max(mnbt, mml)
    thr = rng.choice([0, 0, 0, 4, 8, 16, 30])
    return {"block_size": bs, "num_gpu_blocks": nblocks, "max_num_seqs": seqs,
            "max_num_batched_tokens": mnbt, "max_model_len": mml,
            "enable_prefix_caching": rng.random() < 0.8, "enable_chunked_prefill": chunked,
            "long_prefill_token_threshold": min(thr, mml),
            "scheduling_policy": rng.choice(["fcfs", "fcfs", "priority"])}


def scenario_from_seed(seed: int, policy: str | None = None) -> dict:
    """One random scenario, fully determined by the seed."""
    rng = random.Random(seed)
    cfg = _config(rng)
    mml = cfg["max_model_len"]
    n = rng.randint(1, 10)
    prompts = _prompts(rng, n, max(1, min(mml - 1, rng.choice([8, 20, 40, 80]))))
    reqs = []
    for i, p in enumerate(prompts):
        mt = rng.randint(1, max(1, min(30, mml - len(p))))
        eos = rng.choice([None, None, rng.randint(1, mt + 2)])
        reqs.append({"id": f"r{i:02d}", "arrival_step": rng.choice([0, 0, rng.randint(0, 12)]),
                     "prompt_token_ids": p, "max_tokens": mt,
                     "priority": rng.randint(0, 3), "eos_after": eos})
    aborts = []
    for r in reqs:
        if rng.random() < 0.15:
            aborts.append({"id": r["id"], "step": rng.randint(0, 25)})
    return {"policy": policy or rng.choice(["vllm", "vllm-async"]), "config": cfg,
            "requests": reqs, "aborts": aborts, "num_steps": rng.randint(20, 70)}


def stress_scenario_from_seed(seed: int, policy: str | None = None) -> dict:
    """Many requests, a pool barely above one max_model_len sequence, late arrivals and aborts."""
    sc = scenario_from_seed(seed, policy)
    rng = random.Random(seed * 7919 + 1)
    cfg = sc["config"]
    cfg["num_gpu_blocks"] = -(-cfg["max_model_len"] // cfg["block_size"]) + 1 + rng.choice([0, 1, 2, 3, 5])
    cfg["max_num_seqs"] = rng.choice([2, 4, 8, 16])
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    extra = scenario_from_seed(seed + 10**6, policy)["requests"]
    mml = cfg["max_model_len"]
    for i, r in enumerate(extra):
        r["id"] = f"s{i:02d}"
        r["prompt_token_ids"] = r["prompt_token_ids"][: mml - 1]
        r["max_tokens"] = max(1, min(r["max_tokens"], mml - len(r["prompt_token_ids"])))
        if r["eos_after"] is not None and rng.random() < 0.5:
            r["eos_after"] = None
        sc["requests"].append(r)
    for r in sc["requests"]:
        r["arrival_step"] = rng.choice([0, rng.randint(0, 30)])
        if rng.random() < 0.1:
            sc["aborts"].append({"id": r["id"], "step": rng.randint(0, 60)})
    sc["num_steps"] = rng.randint(60, 140)
    return sc


def main(argv: list[str]) -> int:
    """Write N scenarios (seeds SEED..SEED+N-1) as OUTDIR/rand_<seed>.json (or stress_<seed>)."""
    outdir, n, seed = Path(argv[0]), int(argv[1]), int(argv[2])
    stress = len(argv) > 3 and argv[3] == "stress"
    make, prefix = (stress_scenario_from_seed, "stress") if stress else (scenario_from_seed, "rand")
    outdir.mkdir(parents=True, exist_ok=True)
    for s in range(seed, seed + n):
        (outdir / f"{prefix}_{s}.json").write_text(json.dumps(make(s)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
