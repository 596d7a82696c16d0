"""The assembler: vLLM chat-completion chunks in, Responses stream events out."""

from proxy.core.events.assembler.assembler import Assembler, Phase, add_usage, map_usage

__all__ = ["Assembler", "Phase", "add_usage", "map_usage"]
