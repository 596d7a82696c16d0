"""The simulated model and a web search tool (docs/SIMULATOR.md "Web search"). Pure.

A tool "looks like web search" when its function is named `web_search` (or `web_search_<n>`,
the proxy's name when the client took `web_search`) and its parameters declare a `query`
property: the model calls it with the user's question (a `query=...` word in the text, or
`call=`/`call_args=` directives, say otherwise). After the tool's answer, when that answer lists
results as the proxy writes them (`[n] <title>`, `URL: <url>`, then the result's text), the model
answers by quoting the first sentence of the first result, citing it: `"<sentence>" [n]`.
"""

from __future__ import annotations

from typing import Any

from proxy.simulator.request import Tool
from proxy.simulator.tokens import content_text

NAME = "web_search"


def is_search_tool(tool: Tool) -> bool:
    name = tool.name
    numbered = name.startswith(NAME + "_") and name[len(NAME) + 1:].isdigit()
    properties = tool.parameters.get("properties")
    return (name == NAME or numbered) and isinstance(properties, dict) and "query" in properties


def search_answer(messages: list[dict[str, Any]]) -> str | None:
    """The answer to a trailing web search result, or None when the last message is no such
    result (or it found nothing to quote)."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    last = messages[-1]
    names = {str(call.get("id")): str((call.get("function") or {}).get("name"))
             for message in messages for call in message.get("tool_calls") or ()
             if isinstance(call, dict)}
    name = names.get(str(last.get("tool_call_id")), "")
    if not (name == NAME or name.startswith(NAME + "_")):
        return None
    lines = content_text(last.get("content")).splitlines()
    for at, line in enumerate(lines):
        marker, _, _ = line.partition(" ")
        if not (marker.startswith("[") and marker.endswith("]") and marker[1:-1].isdigit()):
            continue
        text = " ".join(lines[at + 2].split()) if at + 2 < len(lines) and \
            lines[at + 1].startswith("URL: ") else ""
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
