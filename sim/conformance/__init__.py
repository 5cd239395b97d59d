"""Conformance: scenarios replayed through our policies with a fake model, printed as step logs in
the format the engines' own schedulers print (the oracles), so a diff shows where we differ.

| module | owns |
|---|---|
| `files.py` | loading a scenario file, the step log's format, batch output, exit codes |
| `vllm.py`, `vllm_scenario.py`, `vllm_fake_model.py` | vLLM 0.33.0's schedulers (docs/policies-vllm.md) |
| `trtllm.py` | TensorRT-LLM's PyExecutor step and schedulers (docs/policies-trtllm.md) |
| `sglang.py` | SGLang 0.5.23's overlap-loop log (docs/policies-sglang.md) |
| `dispatch.py` | `schedsim conformance`: each scenario to its engine's replay, by its format |

Imports the policies only.
"""
