"""One leading `system` message: how instructions, system and developer text reach the model.

Chat templates such as Qwen's refuse a system message anywhere but first ("System message must
be at the beginning"), and real clients send several: Codex sends `instructions` plus two
developer messages, agent frameworks add developer notes mid-history. So every system message of
a translated request (instructions first, then each system/developer input item in the order it
came, wherever it sat in the history) is merged into ONE leading system message, joined by a
blank line; the other messages keep their order.

A developer message in the middle of a history therefore moves to the front, behind the text
that came before it: the model still reads every instruction, in the order they were given, but
no longer sees where in the dialogue one was added. That is the only placement every template
accepts (docs/contract.md, "Request tolerance").

Pure; runs once per request on the message list (not per token).
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]

SEPARATOR = "\n\n"


def lead_with_system(messages: list[Message]) -> list[Message]:
    """`messages` with every system message merged into one leading system message."""
    system = [m for m in messages if m.get("role") == "system"]
    if not system or (len(system) == 1 and messages[0] is system[0]):
        return messages
    rest = [m for m in messages if m.get("role") != "system"]
    return [{"role": "system", "content": _merged([m.get("content") for m in system])}, *rest]


def _merged(contents: list[Any]) -> str | list[dict[str, Any]]:
    if all(isinstance(c, str) for c in contents):
        return SEPARATOR.join(c for c in contents if c)
    # Some system message carries non-text parts: keep every part, in order, with the same
    # separator between the messages' parts.
    parts: list[dict[str, Any]] = []
    for content in contents:
        if not content:
            continue
        if parts:
            parts.append({"type": "text", "text": SEPARATOR})
        parts += [{"type": "text", "text": content}] if isinstance(content, str) else content
    return parts
