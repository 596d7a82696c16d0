"""How an upstream turn's finish_reason ends the response, and whether a tool call was cut.

vLLM reports a call cut by `max_tokens` as `finish_reason: "tool_calls"` (v0.10 to mid-2026;
v0.10 even closes the cut JSON), so "tool_calls" alone never proves the call whole: the turn's
completion tokens reaching the request's limit, or arguments that do not parse, mean it was cut
and the client must not run it.
"""

from __future__ import annotations

from typing import Any

import orjson

# finish_reason → the response's `incomplete_details.reason`. `repetition` (vLLM's repetition
# detector stopped a looping model) cut the answer short like a limit does, but is no limit the
# client could raise: incomplete, with no reason the SDKs know that would be true.
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter",
              "repetition": None}
WHOLE = frozenset({"stop", "tool_calls"})  # the model ended its turn itself


def call_was_cut(arguments: str, limit: Any, tokens: Any) -> bool:
    """A call the turn ended on was cut: the limit was reached (`tokens`: the turn's completion
    tokens) or its arguments are not JSON. Once per turn, never per chunk."""
    if isinstance(limit, int) and isinstance(tokens, int) and tokens >= limit:
        return True
    if not arguments:  # a call with no arguments at all is whole
        return False
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return True
    return False
