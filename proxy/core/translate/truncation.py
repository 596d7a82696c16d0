"""`truncation: "auto"`: drop the oldest messages until the prompt fits the model's context,
and the recognition of "context too long" wherever an upstream says it.

What is dropped (on the chat messages a create sends upstream, core/translate/chat.py's output):
- never the leading system message (instructions, system and developer text, merged into one
  by core/translate/system_prompt.py);
- never the newest unit: there must be something to answer;
- otherwise whole units, oldest first. A unit is one message, except that an assistant message
  with `tool_calls` and the `tool` messages answering it are one unit: a function call is never
  kept without its output, nor an output without its call.

How much: the caller measures the whole prompt once (the fleet's `/tokenize`) and `shorten`
estimates each unit's share of that count from its share of the serialized request (JSON
bytes of messages and tools), dropping units until the estimate fits. The caller measures the
shortened prompt again and repeats while it is still too long (services/responses/tokenize.py
bounds the rounds); the estimate only decides how much to try, the fleet's count decides what is
sent.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

Message = dict[str, Any]

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"

# How vLLM (and OpenAI) word a prompt longer than the context: "This model's maximum context
# length is N tokens...", "...is longer than the maximum model length of N", and the request
# validators' "...exceeds the max_model_len...". Matched once per failure, never per chunk.
_OVERFLOW_MARKERS = ("maximum context length", "maximum model length", "max_model_len",
                     "context length exceeded", "context_length_exceeded")


def is_context_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _OVERFLOW_MARKERS)


def units(messages: list[Message]) -> tuple[list[Message], list[list[Message]]]:
    """(the leading system messages, the droppable units in order)."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    groups: list[list[Message]] = []
    for message in messages[head:]:
        if message.get("role") == "tool" and groups:
            groups[-1].append(message)  # an output stays with its call
        else:
            groups.append([message])
    return messages[:head], groups


def shorten(messages: list[Message], tools: list[dict[str, Any]] | None, count: int,
            budget: int) -> list[Message]:
    """`messages` without their oldest units, enough that the estimated count fits `budget`
    (`count` is the measured count of `messages` with `tools`). The same list when nothing can
    be dropped."""
    head, groups = units(messages)
    if len(groups) < 2 or count <= budget:
        return messages
    sizes = [len(orjson.dumps(group)) for group in groups]
    whole = len(orjson.dumps(head)) + sum(sizes) + (len(orjson.dumps(tools)) if tools else 0)
    per_byte = count / max(whole, 1)
    estimate = float(count)
    dropped = 0
    while estimate > budget and dropped < len(groups) - 1:
        estimate -= sizes[dropped] * per_byte
        dropped += 1
    return [*head, *(message for group in groups[dropped:] for message in group)]
