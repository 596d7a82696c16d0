"""A cached chat completion, both ways: folded from a stream's chunks, and streamed again.

One cache entry serves stream and non-stream clients of `/v1/chat/completions`, so the entry is
the non-streamed shape (`chat.completion`). `fold` builds it from the `data:` payloads of a
streamed answer, once, after the stream ended (never per chunk); `chunks` turns it back into a
complete stream: per choice a role chunk, the reasoning and the content as one delta each, the
finish chunk; the usage chunk when the client asked for it; then `[DONE]`.

Only answers that can be served again are folded: every choice ended with `finish_reason`
"stop", no tool calls, no error frame, `[DONE]` seen. Anything else folds to None.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.events.sse import DONE

# vLLM names the reasoning delta `reasoning` (0.16+) or `reasoning_content` (before).
_REASONING_FIELDS = ("reasoning", "reasoning_content")


def storable(completion: dict[str, Any]) -> bool:
    """A complete answer without tool calls: what the cache may keep and serve."""
    choices = completion.get("choices")
    if completion.get("object") != "chat.completion" or not isinstance(choices, list) \
            or not choices:
        return False
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or choice.get("finish_reason") != "stop":
            return False
        if message.get("tool_calls") or message.get("function_call"):
            return False
        if choice.get("logprobs"):
            return False
    return True


class _Choice:
    """One choice's text so far."""

    __slots__ = ("content", "finish", "reasoning", "reasoning_field")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_field = _REASONING_FIELDS[0]
        self.finish: Any = None

    def add(self, choice: dict[str, Any]) -> bool:
        """False when the choice carries what a cache must not keep (tool calls, logprobs)."""
        delta = choice.get("delta") or {}
        if delta.get("tool_calls") or delta.get("function_call") or choice.get("logprobs"):
            return False
        if delta.get("content"):
            self.content.append(delta["content"])
        for name in _REASONING_FIELDS:
            if delta.get(name):
                self.reasoning_field = name
                self.reasoning.append(delta[name])
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        return True

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message[self.reasoning_field] = "".join(self.reasoning)
        return message


def fold(payloads: list[bytes]) -> dict[str, Any] | None:
    """The completion a streamed answer amounts to, or None if it cannot be kept."""
    if not payloads or payloads[-1].strip() != DONE:
        return None
    head: dict[str, Any] | None = None
    choices: dict[int, _Choice] = {}
    usage: Any = None
    try:
        for payload in payloads[:-1]:
            chunk = orjson.loads(payload)
            if not isinstance(chunk, dict) or "error" in chunk:
                return None
            head = head or chunk
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                if not choices.setdefault(int(choice["index"]), _Choice()).add(choice):
                    return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if head is None or not choices:
        return None
    completion = {"id": head.get("id"), "object": "chat.completion",
                  "created": head.get("created"), "model": head.get("model"),
                  "choices": [{"index": index, "message": choices[index].message(),
                               "logprobs": None, "finish_reason": choices[index].finish}
                              for index in sorted(choices)],
                  "usage": usage}
    return completion if storable(completion) else None


def chunks(completion: dict[str, Any], *, include_usage: bool) -> bytes:
    """The whole stream of `completion` as SSE bytes, ending with `data: [DONE]`."""
    base = {"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"]}
    if include_usage:
        base["usage"] = None
    out: list[bytes] = []

    def emit(choice: dict[str, Any]) -> None:
        out.append(b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n")

    for choice in completion["choices"]:
        index = choice["index"]
        message = choice["message"]
        emit({"index": index, "delta": {"role": "assistant", "content": ""},
              "logprobs": None, "finish_reason": None})
        for name in _REASONING_FIELDS:
            if message.get(name):
                emit({"index": index, "delta": {name: message[name]}, "logprobs": None,
                      "finish_reason": None})
        if message.get("content"):
            emit({"index": index, "delta": {"content": message["content"]}, "logprobs": None,
                  "finish_reason": None})
        emit({"index": index, "delta": {}, "logprobs": None,
              "finish_reason": choice["finish_reason"]})
    if include_usage:
        frame = {**base, "choices": [], "usage": completion.get("usage")}
        out.append(b"data: " + orjson.dumps(frame) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)
