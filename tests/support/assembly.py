"""Running the pure assembler over raw vLLM bytes, as the service does, minus the I/O."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.core.events.assembler import Assembler
from proxy.core.events.chatstream import ChatStreamReader
from proxy.core.ids import counter_ids

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "golden"
CREATED_AT = 1763800000


def base_response(model: str = "sim-model") -> dict[str, Any]:
    """A Response skeleton as the service builds it: identity plus the request echo."""
    return {
        "id": "resp_1", "object": "response", "created_at": CREATED_AT, "model": model,
        "instructions": None, "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}}, "reasoning": {"effort": None, "summary": None},
        "temperature": None, "top_p": None, "max_output_tokens": None, "max_tool_calls": None,
        "metadata": {}, "user": None, "store": True, "background": False,
        "previous_response_id": None, "conversation": None, "truncation": "disabled",
        "top_logprobs": None, "service_tier": "default", "prompt_cache_key": None,
        "safety_identifier": None, "prompt": None,
    }


def golden_bytes(name: str) -> bytes:
    return (GOLDEN / f"{name}.sse").read_bytes()


def assemble(raw: bytes, cuts: Sequence[int] = (), *, connection_lost: bool = False,
             echo: dict[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
    """Feed `raw` split at `cuts` (byte offsets) and end the stream as the service would: a
    clean end of body, or (`connection_lost`) a transport error. `echo`: request fields over
    the default echo (`max_output_tokens`, ...)."""
    assembler = Assembler(base_response() | (echo or {}), ids=counter_ids(),
                          clock=lambda: CREATED_AT + 5, **options)
    reader = ChatStreamReader(assembler)
    events = assembler.start()
    bounds = [0, *sorted(set(cuts)), len(raw)]
    for start, end in itertools.pairwise(bounds):
        events += reader.feed(raw[start:end])
    if connection_lost:
        events += assembler.fail("upstream connection lost")
    else:
        events += reader.end()
    return events
