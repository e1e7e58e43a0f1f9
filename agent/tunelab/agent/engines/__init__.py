"""Engine profiles: what the agent knows about vLLM, SGLang and any other OpenAI-compatible server
(readiness path, start-up phases and their log lines, failure signatures, metrics prefix)."""
