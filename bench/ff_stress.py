"""Fast-forward stress hunt: random configurations, tables with it on and off must be identical.

Usage: python bench/ff_stress.py [FIRST_SEED] [SECONDS] [POLICY_PREFIX]

Not part of the test suite (it runs for minutes): random multi-turn workloads with shared system
prompts, priorities, aborts, KV-load failures, deferred block frees, tight pools, block sizes,
engines and every policy that jumps. Prints one line per difference (seed and config), counts
configurations the policy rejects (e.g. orca/static need max_num_batched_tokens >=
max_model_len) and runs that stop where TensorRT-LLM itself fails or a policy wedges (identically
with it on and off), and a summary line. POLICY_PREFIX (e.g. `trtllm:`) draws only the policies it starts.
"""

import json
import random
import sys
import tempfile
import time

from schedsim import RunConfig, simulate
from schedsim.engine.loop import PolicyStuckError
from schedsim.policies.trtllm import TrtllmFailure


def wl_spec(rng: random.Random, path: str) -> str:
    """A random session/short-request workload spec written to `path`."""
    classes = [
        {
            "name": "chat",
            "weight": 2,
            "prompt": {"dist": "lognormal", "mean": rng.choice([64, 300, 900]), "cv": 1.0},
            "output": {"dist": "lognormal", "mean": rng.choice([20, 80, 250]), "cv": 1.0},
            "turns": {"dist": "uniform", "low": 1, "high": 4},
            "think_time_s": rng.choice([0.2, 2.0]),
            "system_prompt_tokens": rng.choice([0, 64, 500]),
            "system_prompts": rng.choice([1, 3]),
        },
        {
            "name": "short",
            "weight": 1,
            "prompt": {"dist": "lognormal", "mean": 100, "cv": 0.5},
            "output": {"dist": "lognormal", "mean": rng.choice([5, 40]), "cv": 1.0},
            "priority": rng.choice([0, 1]),
        },
    ]
    proc = rng.choice(["poisson", "gamma"])
    arrival = {"process": proc, "rate": rng.choice([1.0, 4.0, 12.0])}
    if proc == "gamma":
        arrival["cv"] = 2.0
    spec = {
        "arrival": arrival,
        "classes": classes,
        "num_requests": rng.choice([40, 120]),
        "seed": rng.randrange(1000),
    }
    json.dump(spec, open(path, "w"))
    return path


def trtllm_options(rng: random.Random) -> dict:
    """TensorRT-LLM knobs: look-ahead reservations, chunking, batch caps, LoRA pages, micro-batches."""
    opts: dict = {
        "two_step_lookahead": rng.random() < 0.4,
        "enable_prefix_aware_scheduling": rng.random() < 0.7,
        "chunking_policy": rng.choice(["first-come-first-served", "equal-progress", "force-chunk"]),
    }
    if rng.random() < 0.3:
        opts["max_batch_size"] = rng.choice([2, 8, 32])
    if rng.random() < 0.2:
        opts["max_peft_pages"] = rng.choice([1, 4])
    if rng.random() < 0.1:
        opts["num_micro_batches"] = 2
    return opts


POLICIES = [
    "vllm",
    "vllm-async",
    "vllm",
    "vllm-async",
    "orca",
    "sarathi",
    "static",
    "sglang-overlap",
    "sglang-overlap",
    "trtllm:max-requests",
    "trtllm:guaranteed-no-evict",
    "trtllm:static-batch",
    "trtllm:max-utilization",
    "trtllm:max-utilization",
]


class Stopped(Exception):
    """Both runs stopped where TensorRT-LLM fails, at the same step for the same reason."""


def one(seed: int, tmp: str, prefix: str = "") -> int | str:
    """Steps jumped, or a line describing a difference."""
    rng = random.Random(seed)
    policy = rng.choice([p for p in POLICIES if p.startswith(prefix)])
    kw = dict(
        policy=policy,
        trace=wl_spec(rng, f"{tmp}/w{seed % 8}.json"),
        seed=seed,
        block_size=rng.choice([8, 16, 32]),
        enable_prefix_caching=rng.random() < 0.8,
        max_tokens_source=rng.choice(["output", "cap"]),
        record_itl=True,
    )
    if rng.random() < 0.6:
        blocks = rng.choice([200, 400, 1000])
        kw.update(
            num_gpu_blocks=blocks,
            max_model_len=min(4096, (blocks - 1) * kw["block_size"]),
            max_num_seqs=rng.choice([4, 16, 64]),
            max_num_batched_tokens=rng.choice([256, 1024, 4096]),
        )
    if rng.random() < 0.3:
        kw.update(abort_fraction=0.2, abort_window_s=rng.choice([0.5, 5.0]))
    if rng.random() < 0.2 and policy.startswith("vllm"):
        kw.update(kv_load_failure_fraction=0.1)
    if rng.random() < 0.3 and policy.startswith("vllm"):
        kw.update(scheduling_policy="priority")
    if rng.random() < 0.2 and policy.startswith("vllm"):
        kw.update(engine=rng.choice(["sync", "async"]))
    if rng.random() < 0.2:
        kw.update(max_sim_time=rng.choice([3.0, 10.0]))
    if policy.startswith("trtllm"):
        kw.update(policy_options=trtllm_options(rng))
    if policy.startswith("vllm") and rng.random() < 0.3:
        kw.update(policy_options={"defer_block_free": True})  # finishes park blocks behind fences
    res = []
    stops = []
    for ff in (False, True):
        try:
            res.append(simulate(RunConfig(fast_forward=ff, **kw)))
        except (TrtllmFailure, PolicyStuckError) as stop:  # a failure or a wedge: the same both ways
            stops.append(str(stop))
    if stops:
        if len(stops) == 2 and stops[0] == stops[1]:
            raise Stopped(stops[0])
        return f"seed {seed}: stops differ {stops}; cfg {kw}"
    for name in ("requests", "steps", "timeline", "itl"):
        a, b = getattr(res[0], name), getattr(res[1], name)
        if not a.equals(b):
            return f"seed {seed}: {name} differs; cfg {kw}"
    diag = ("sim_wall_s", "fast_forward_jumps", "fast_forward_steps")
    a, b = ({k: v for k, v in r.summary.items() if k not in diag} for r in res)
    if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        return f"seed {seed}: summary differs; cfg {kw}"
    return res[1].summary["fast_forward_steps"]


def main() -> None:
    """Run configurations from FIRST_SEED for SECONDS seconds."""
    start = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    duration = float(sys.argv[2]) if len(sys.argv) > 2 else 300.0
    prefix = sys.argv[3] if len(sys.argv) > 3 else ""
    t0, n, jumped, rejected, diffs, stopped = time.time(), 0, 0, 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        while time.time() - t0 < duration:
            try:
                r = one(start + n, tmp, prefix)
            except ValueError:  # the policy rejects this configuration (a named field)
                r, rejected = 0, rejected + 1
            except Stopped:
                r, stopped = 0, stopped + 1
            if isinstance(r, str):
                diffs += 1
                print(r, flush=True)
            else:
                jumped += r
            n += 1
    print(
        f"{n} configurations ({rejected} rejected by their policy, {stopped} stopped where a policy "
        f"fails or wedges), {diffs} differences, {jumped} steps jumped in total"
    )


if __name__ == "__main__":
    main()
