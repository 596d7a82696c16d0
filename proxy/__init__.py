"""responses-proxy: an OpenAI Responses API server in front of a vLLM fleet."""

__version__ = "0.1.0"
