"""kvoffload: what it costs to offload an LLM's KV cache and weights from GPU memory."""

__version__ = "0.1.0"
