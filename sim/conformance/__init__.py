"""Scenario replays against the engines' real schedulers: `vllm` (vLLM 0.33.0's step log),
`sglang` (SGLang 0.5.23's overlap-loop log) and `dispatch` (`schedsim conformance`, by format)."""
