"""Every tool output answers a call: a `function_call_output` or `custom_tool_call_output`
whose `call_id` matches no call before it (in the history, or earlier in the same input) is a
400 naming `input[i].call_id`, as OpenAI answers it. Sent upstream, such an orphan makes a
`tool` message no assistant call asked for: chat templates (gpt-oss's among them) refuse it or
silently mis-attribute it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.compaction import COMPACTION
from proxy.core.request.fields import at, bad
from proxy.core.types import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    Item,
)

CALLS = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL})
OUTPUTS = frozenset({FUNCTION_CALL_OUTPUT, CUSTOM_TOOL_CALL_OUTPUT})


def check_call_ids(history: Sequence[Item], items: Sequence[Item]) -> None:
    """`items`: the request's input, `item_reference`s resolved (a referenced call counts).
    After a compaction item nothing is checked: the calls it stood for are no longer seen."""
    calls: set[object] = set()
    for item in history:
        if item.get("type") == COMPACTION:
            return
        if item.get("type") in CALLS:
            calls.add(item.get("call_id"))
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == COMPACTION:
            return
        if kind in CALLS:
            calls.add(item.get("call_id"))
        elif kind in OUTPUTS and item.get("call_id") not in calls:
            raise bad(at(at("input", i), "call_id"),
                      f"No tool call found for {kind.replace('_', ' ')} with call_id "
                      f"{item.get('call_id')}.")
