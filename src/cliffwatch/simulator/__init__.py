"""The built-in simulated LLM inference server (OpenAI-compatible, continuous batching)."""
