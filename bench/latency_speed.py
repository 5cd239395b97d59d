"""step_time() cost per call for each latency-model kind (it runs once per simulated step).

Run: python bench/latency_speed.py
"""

from __future__ import annotations

import time

from schedsim.latency import CpuCostModel, StepShape, make_latency_model
from schedsim.latency.fitted import FittedStepModel

SHAPES = {
    "decode x8": StepShape(decodes=[(700, 0)] * 8),
    "decode x256": StepShape(decodes=[(700 + i, 0) for i in range(256)]),
    "mixed 512+128": StepShape(prefills=[(512, 1024)], decodes=[(900 + i, 0) for i in range(128)]),
    "drafts x64": StepShape(decodes=[(900 + i, 3) for i in range(64)]),
}


def per_call_us(fn, arg, n: int = 20000) -> float:
    fn(arg)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(arg)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main() -> None:
    fitted = FittedStepModel(
        {
            "intercept_s": 4e-3,
            "prefill_tokens": 6e-5,
            "decode_count": 3e-5,
            "sum_context": 1e-7,
            "sum_context_sq": 2e-9,
        }
    )
    models = {
        "roofline (llama-3.1-8b, h100)": make_latency_model("llama-3.1-8b", "h100", engine="none"),
        "  + vllm overhead terms": make_latency_model("llama-3.1-8b", "h100"),
        "table (llama-2-70b, h100, tp8)": make_latency_model("llama-2-70b", "h100", 8, engine="none"),
        "  + vllm overhead terms ": make_latency_model("llama-2-70b", "h100", 8),
        "fitted": fitted,
    }
    print(f"{'model':32s} " + " ".join(f"{k:>14s}" for k in SHAPES))
    for name, model in models.items():
        print(
            f"{name:32s} " + " ".join(f"{per_call_us(model.step_time, s):11.1f} us" for s in SHAPES.values())
        )
    cpu = CpuCostModel()
    print(f"CpuCostModel.phase_time: {per_call_us(lambda _: cpu.phase_time('schedule', 128, 256), 0):.2f} us")


if __name__ == "__main__":
    main()
