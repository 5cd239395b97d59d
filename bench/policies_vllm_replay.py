"""Policy-only replay of the Azure conversation trace: how fast are schedule() + update_from_output?

No latency model: every step is taken to last STEP_S seconds, so arrivals map to step numbers; the
fake model ends each request at its trace output length. Prints wall seconds, steps per second and
peak RSS. Usage: python bench/policies_vllm_replay.py [POLICY] [TRACE_CSV] [MAX_REQUESTS]
"""

from __future__ import annotations

import csv
import resource
import sys
import time
from datetime import datetime

from schedsim.policies import Request, StepResult, make_policy
from schedsim.traces import shipped_path

STEP_S = 0.03
TRACE = str(shipped_path("azure-conv-2023"))  # the shipped copy


def load(path: str, limit: int) -> list[tuple[int, int, int]]:
    """(arrival step, prompt tokens, output tokens) rows."""
    rows = []
    with open(path) as f:
        reader = csv.DictReader(f)
        t0 = None
        for row in reader:
            ts = datetime.fromisoformat(row["TIMESTAMP"][:26]).timestamp()
            t0 = ts if t0 is None else t0
            rows.append(
                (
                    int((ts - t0) / STEP_S),
                    max(1, int(row["ContextTokens"])),
                    max(1, int(row["GeneratedTokens"])),
                )
            )
            if len(rows) >= limit:
                break
    return rows


def replay(name: str, rows: list[tuple[int, int, int]]) -> tuple[int, int, float, float, int]:
    """Run to completion; returns (steps, preemptions, wall s, CPU s, scheduled request-steps)."""
    policy = make_policy(
        name,
        block_size=16,
        num_gpu_blocks=28000,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=16384,
    )
    out_len: dict[str, int] = {}
    reqs = []
    for i, (arr, p, o) in enumerate(rows):
        p = min(p, 16000)
        o = min(o, 16384 - p)
        reqs.append((arr, Request(f"r{i}", arr * STEP_S, p, o, eos_token_id=None)))
        out_len[f"r{i}"] = o
    queue = []
    nxt = 0
    step = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    req_steps = 0
    while nxt < len(reqs) or policy.has_requests() or queue:
        while nxt < len(reqs) and reqs[nxt][0] <= step:
            policy.add_request(reqs[nxt][1])
            nxt += 1
        if policy.has_requests():
            plan = policy.schedule()
            sampled = {
                rid: ([] if policy.requests[rid].is_prefill_chunk else [7])
                for rid in plan.num_scheduled_tokens
            }
            queue.append((plan, StepResult(sampled_token_ids=sampled)))
            req_steps += len(sampled)
        if queue and (len(queue) >= policy.max_concurrent_batches or not policy.has_requests()):
            policy.update_from_output(*queue.pop(0))
        step += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    preempt = sum(r.num_preemptions for _, r in reqs)
    return step, preempt, wall, cpu, req_steps


def main(argv: list[str]) -> int:
    """Print the figures."""
    name = argv[0] if argv else "vllm-async"
    path = argv[1] if len(argv) > 1 and argv[1] else TRACE
    limit = int(argv[2]) if len(argv) > 2 else 10**9
    rows = load(path, limit)
    steps, preempt, wall, cpu, req_steps = replay(name, rows)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"policy={name} requests={len(rows)} steps={steps} request_steps={req_steps} "
        f"preemptions={preempt} wall_s={wall:.2f} cpu_s={cpu:.2f} steps_per_cpu_s={steps / cpu:.0f} "
        f"cpu_us_per_request_step={1e6 * cpu / req_steps:.2f} peak_rss_mib={rss:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
