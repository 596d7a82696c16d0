"""The simulated model and a search tool, web or file (docs/SIMULATOR.md "Web search" and
"File search"). Pure.

A tool "looks like a search" when its function is named `web_search` or `file_search` (or
`<name>_<n>`, the proxy's name when the client took the name) and its parameters declare a
`query` property: the model calls it with the user's question (a `query=...` word in the text,
or `call=`/`call_args=` directives, say otherwise). After the tool's answer, when that answer
lists results as the proxy writes them (`[n] <title>`, then `URL: <url>` or `File: <file id>`,
then the result's text), the model answers by quoting the first sentence of the first result,
citing it: `"<sentence>" [n]`.
"""

from __future__ import annotations

from typing import Any

from proxy.simulator.request import Tool
from proxy.simulator.tokens import content_text

NAMES = ("web_search", "file_search")
# The line after a result's `[n] <title>` that says where it comes from.
_SOURCE_LINES = ("URL: ", "File: ")


def _search_name(name: str) -> bool:
    return any(name == base or (name.startswith(base + "_") and name[len(base) + 1:].isdigit())
               for base in NAMES)


def is_search_tool(tool: Tool) -> bool:
    properties = tool.parameters.get("properties")
    return _search_name(tool.name) and isinstance(properties, dict) and "query" in properties


def search_answer(messages: list[dict[str, Any]]) -> str | None:
    """The answer to a trailing search result, or None when the last message is no such
    result (or it found nothing to quote)."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    last = messages[-1]
    names = {str(call.get("id")): str((call.get("function") or {}).get("name"))
             for message in messages for call in message.get("tool_calls") or ()
             if isinstance(call, dict)}
    name = names.get(str(last.get("tool_call_id")), "")
    if not _search_name(name):
        return None
    lines = content_text(last.get("content")).splitlines()
    for at, line in enumerate(lines):
        marker, _, _ = line.partition(" ")
        if not (marker.startswith("[") and marker.endswith("]") and marker[1:-1].isdigit()):
            continue
        text = " ".join(lines[at + 2].split()) if at + 2 < len(lines) and \
            lines[at + 1].startswith(_SOURCE_LINES) else ""
        if text:
            return f'"{first_sentence(text)}" {marker}'
    return None


def first_sentence(text: str) -> str:
    words: list[str] = []
    for word in text.split():
        words.append(word)
        if word[-1] in ".!?":
            break
    return " ".join(words)
