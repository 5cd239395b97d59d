"""schedsim.conformance.vllm."""
