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
    return {
        "block_size": bs,
        "num_gpu_blocks": nblocks,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": mnbt,
        "max_model_len": mml,
        "enable_prefix_caching": rng.random() < 0.8,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": min(thr, mml),
        "scheduling_policy": rng.choice(["fcfs", "fcfs", "priority"]),
    }


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
        reqs.append(
            {
                "id": f"r{i:02d}",
                "arrival_step": rng.choice([0, 0, rng.randint(0, 12)]),
                "prompt_token_ids": p,
                "max_tokens": mt,
                "priority": rng.randint(0, 3),
                "eos_after": eos,
            }
        )
    aborts = []
    for r in reqs:
        if rng.random() < 0.15:
            aborts.append({"id": r["id"], "step": rng.randint(0, 25)})
    return {
        "policy": policy or rng.choice(["vllm", "vllm-async"]),
        "config": cfg,
        "requests": reqs,
        "aborts": aborts,
        "num_steps": rng.randint(20, 70),
    }


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


def wide_scenario_from_seed(seed: int, policy: str | None = None) -> dict:
    """Up to 30 requests sharing long prefixes in a pool where cached blocks get evicted."""
    rng = random.Random(seed)
    bs = rng.choice([8, 16, 32])
    mml = rng.choice([256, 512, 1024])
    cfg = {
        "block_size": bs,
        "num_gpu_blocks": -(-mml // bs) + 1 + rng.choice([0, 4, 16, 64]),
        "max_num_seqs": rng.choice([4, 16, 32]),
        "max_num_batched_tokens": rng.choice([64, 256, 1024]),
        "max_model_len": mml,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": rng.random() < 0.85,
        "long_prefill_token_threshold": rng.choice([0, 0, 32, 100]),
        "scheduling_policy": rng.choice(["fcfs", "priority"]),
    }
    if not cfg["enable_chunked_prefill"]:
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
    roots = [[rng.randrange(3, 900) for _ in range(rng.randint(10, mml // 2))] for _ in range(2)]
    reqs = []
    for i in range(rng.randint(5, 30)):
        root = rng.choice(roots)
        p = root[: rng.randint(1, len(root))] + [rng.randrange(3, 900) for _ in range(rng.randint(0, 40))]
        p = p[: mml - 1]
        mt = rng.randint(1, min(60, mml - len(p)))
        reqs.append(
            _req(
                f"w{i:02d}",
                p,
                mt,
                arrival=rng.choice([0, rng.randint(0, 40)]),
                priority=rng.randint(0, 2),
                eos=rng.choice([None, None, rng.randint(1, mt + 1)]),
            )
        )
    aborts = [{"id": r["id"], "step": rng.randint(0, 80)} for r in reqs if rng.random() < 0.1]
    return {
        "policy": policy or rng.choice(["vllm", "vllm-async"]),
        "config": cfg,
        "requests": reqs,
        "aborts": aborts,
        "num_steps": rng.randint(60, 160),
    }


def _req(
    rid: str, prompt: list[int], max_tokens: int, arrival: int = 0, priority: int = 0, eos: int | None = None
) -> dict:
    """One scenario request."""
    return {
        "id": rid,
        "arrival_step": arrival,
        "prompt_token_ids": prompt,
        "max_tokens": max_tokens,
        "priority": priority,
        "eos_after": eos,
    }


def _cfg(**kw) -> dict:
    """The oracle's default config with overrides."""
    base = {
        "block_size": 16,
        "num_gpu_blocks": 40,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 128,
        "max_model_len": 512,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "long_prefill_token_threshold": 0,
        "scheduling_policy": "fcfs",
    }
    base.update(kw)
    return base


def handcrafted() -> dict[str, dict]:
    """Named scenarios, one per behaviour worth pinning against the oracle."""
    sc: dict[str, dict] = {}
    small = _cfg(block_size=16, num_gpu_blocks=12, max_model_len=128, max_num_batched_tokens=64)
    pressure = [_req(f"r{i}", [10 + i] * 40, 30, arrival=i // 2) for i in range(6)]
    for pol in ("vllm", "vllm-async"):
        tag = pol.replace("-", "_")
        sc[f"kv_pressure_{tag}"] = {"policy": pol, "config": small, "requests": pressure, "num_steps": 120}
        sc[f"threshold_chunks_{tag}"] = {
            "policy": pol,
            "config": _cfg(max_num_batched_tokens=64, long_prefill_token_threshold=16),
            "requests": [_req(f"r{i}", list(range(3 + i, 103 + i)), 5) for i in range(3)]
            + [_req("late", [9] * 20, 4, arrival=3)],
            "num_steps": 40,
        }
        sc[f"chunked_off_{tag}"] = {
            "policy": pol,
            "config": _cfg(
                enable_chunked_prefill=False,
                max_num_batched_tokens=128,
                max_model_len=128,
                num_gpu_blocks=20,
                max_num_seqs=3,
            ),
            "requests": [
                _req("a", [5] * 100, 6),
                _req("b", [6] * 100, 6),
                _req("c", [7] * 10, 6),
                _req("d", [8] * 10, 6),
            ],
            "num_steps": 40,
        }
        sc[f"priority_preempt_{tag}"] = {
            "policy": pol,
            "config": _cfg(
                scheduling_policy="priority", num_gpu_blocks=10, max_model_len=128, max_num_batched_tokens=96
            ),
            "requests": [
                _req("low", [3] * 30, 40, priority=5),
                _req("mid", [4] * 30, 40, arrival=1, priority=2),
                _req("hi", [5] * 30, 40, arrival=3, priority=0),
                _req("hi2", [6] * 20, 10, arrival=5, priority=0),
            ],
            "num_steps": 150,
        }
        sc[f"prefix_sharing_{tag}"] = {
            "policy": pol,
            "config": _cfg(block_size=8, num_gpu_blocks=30, max_model_len=128),
            "requests": [
                _req("a", [7] * 50, 4),
                _req("b", [7] * 50, 4),
                _req("c", [7] * 48, 3, arrival=2),
                _req("d", [7] * 32 + [9] * 9, 3, arrival=3),
                _req("e", [7] * 64, 2, arrival=9),
            ],
            "num_steps": 30,
        }
        sc[f"aborts_{tag}"] = {
            "policy": pol,
            "config": _cfg(num_gpu_blocks=10, max_model_len=128, max_num_batched_tokens=48),
            "requests": [_req(f"r{i}", [20 + i] * (25 + 7 * i), 20, arrival=i) for i in range(6)],
            "aborts": [
                {"id": "r0", "step": 3},
                {"id": "r5", "step": 2},
                {"id": "r2", "step": 9},
                {"id": "r3", "step": 9},
                {"id": "r1", "step": 60},
                {"id": "r4", "step": 14},
            ],
            "num_steps": 80,
        }
        sc[f"eos_{tag}"] = {
            "policy": pol,
            "config": _cfg(),
            "requests": [_req(f"e{k}", [30 + k] * (5 + k), 6, eos=k) for k in range(1, 8)],
            "num_steps": 15,
        }
        sc[f"max_model_len_{tag}"] = {
            "policy": pol,
            "config": _cfg(max_model_len=48, num_gpu_blocks=8, block_size=8),
            "requests": [_req("a", [1] * 40, 8), _req("b", [2] * 47, 1), _req("c", [3] * 8, 40, arrival=2)],
            "num_steps": 70,
        }
        sc[f"one_seat_priority_{tag}"] = {
            "policy": pol,
            "config": _cfg(max_num_seqs=1, scheduling_policy="priority"),
            "requests": [_req(f"p{i}", [40 + i] * 6, 2, priority=(i * 7) % 4) for i in range(6)],
            "num_steps": 25,
        }
        sc[f"max_tokens_small_{tag}"] = {
            "policy": pol,
            "config": _cfg(max_num_batched_tokens=32),
            "requests": [_req(f"m{i}", [50 + k] * 9, k) for i, k in enumerate((1, 2, 3, 5, 1, 2))],
            "num_steps": 20,
        }
        sc[f"eviction_lru_{tag}"] = {
            "policy": pol,
            "config": _cfg(
                block_size=4, num_gpu_blocks=14, max_model_len=48, max_num_batched_tokens=48, max_num_seqs=2
            ),
            "requests": [
                _req("x", [1] * 16, 2),
                _req("y", [2] * 16, 2, arrival=1),
                _req("z", [3] * 24, 2, arrival=6),
                _req("x2", [1] * 16, 2, arrival=10),
                _req("y2", [2] * 20, 2, arrival=12),
            ],
            "num_steps": 30,
        }
    return sc


def main(argv: list[str]) -> int:
    """Write N scenarios (seeds SEED..SEED+N-1) as OUTDIR/rand_<seed>.json (or stress_<seed>)."""
    if argv and argv[0] == "handcrafted":
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for name, sc in handcrafted().items():
            sc.setdefault("aborts", [])
            (out / f"{name}.json").write_text(json.dumps(sc) + "\n")
        return 0
    outdir, n, seed = Path(argv[0]), int(argv[1]), int(argv[2])
    kind = argv[3] if len(argv) > 3 else "rand"
    make, prefix = {
        "stress": (stress_scenario_from_seed, "stress"),
        "wide": (wide_scenario_from_seed, "wide"),
        "rand": (scenario_from_seed, "rand"),
    }[kind]
    outdir.mkdir(parents=True, exist_ok=True)
    for s in range(seed, seed + n):
        (outdir / f"{prefix}_{s}.json").write_text(json.dumps(make(s)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
