"""The simulator's tokenizer and prompt accounting: words stand in for tokens.

Invariants:
  - a token is a run of non-space characters with the whitespace before it
    ("You said: hi" -> "You", " said:", " hi"), so joining tokens gives back the text exactly;
  - prompt tokens are a pure function of the messages and tools (same request, same count):
    3 for the assistant turn's header, 4 per message plus the words of its text (an image or
    other non-text part counts as one word, `[image]`), the words of each tool call's name and
    arguments, and len(JSON of `tools`) // 4 for the tool definitions.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_TOKEN = re.compile(r"\s*\S+")

REPLY_OVERHEAD = 3
MESSAGE_OVERHEAD = 4


def split(text: str) -> list[str]:
    """`text` as tokens; "".join(split(t)) == t for any t without trailing whitespace."""
    return _TOKEN.findall(text)


def content_text(content: Any) -> str:
    """A message's `content` as plain text: text parts joined by newlines, other parts shown
    as `[image]`, `[audio]`, ... (what a test can see arrived)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = str(part.get("type", ""))
        if kind == "text":
            parts.append(str(part.get("text", "")))
        else:
            parts.append(f"[{kind.removesuffix('_url').removeprefix('input_') or 'part'}]")
    return "\n".join(parts)


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    total = REPLY_OVERHEAD
    for message in messages:
        total += MESSAGE_OVERHEAD + len(content_text(message.get("content")).split())
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                total += len(str(function.get("name", "")).split())
                total += len(str(function.get("arguments", "")).split())
    if tools:
        total += len(orjson.dumps(tools)) // 4
    return total
