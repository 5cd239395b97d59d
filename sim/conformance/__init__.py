"""Conformance: scenarios replayed through our policies with a fake model, printed as step logs in
the format the engines' own schedulers print (the oracles), so a diff shows where we differ.

`vllm.py`: vLLM 0.33.0's Scheduler / AsyncScheduler contract (docs/policies-vllm.md);
`sglang.py`: SGLang 0.5.23's overlap-loop log (docs/policies-sglang.md); `dispatch.py`:
`schedsim conformance`, which sends each scenario to its engine's replay by its format. May
import the policies only.
"""
