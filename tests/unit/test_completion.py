"""core/cache/completion.py: a streamed chat answer folded into one completion, and streamed
again."""

from __future__ import annotations

from typing import Any

import orjson
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.core.cache.completion import chunks, fold, storable
from proxy.core.events.sse import DataDecoder

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "m"}


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> bytes:
    return orjson.dumps({**HEAD, "choices": [{"index": index, "delta": delta,
                                              "logprobs": None, "finish_reason": finish}]})


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning": "think "}), chunk({"reasoning": "hard"}),
    chunk({"content": "Hello"}), chunk({"content": " world"}),
    chunk({}, "stop"),
    orjson.dumps({**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                   "total_tokens": 5}}),
    b"[DONE]",
]


def test_fold_builds_the_non_streamed_completion() -> None:
    completion = fold(STREAM)
    assert completion is not None
    parsed = ChatCompletion.model_validate(completion)
    assert parsed.choices[0].message.content == "Hello world"
    assert completion["choices"][0]["message"]["reasoning"] == "think hard"
    assert completion["usage"]["total_tokens"] == 5


def test_fold_refuses_what_cannot_be_served_again() -> None:
    assert fold(STREAM[:-1]) is None  # no [DONE]: the stream was cut
    tool = chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                  "function": {"name": "f", "arguments": "{}"}}]})
    assert fold([STREAM[0], tool, chunk({}, "tool_calls"), b"[DONE]"]) is None
    assert fold([STREAM[0], chunk({"content": "x"}, "length"), b"[DONE]"]) is None
    assert fold([STREAM[0], b'{"error": {"message": "boom"}}', b"[DONE]"]) is None
    assert fold([b"not json", b"[DONE]"]) is None


def test_chunks_stream_the_completion_again() -> None:
    completion = fold(STREAM)
    assert completion is not None
    body = chunks(completion, include_usage=True)
    payloads = DataDecoder().feed(body)
    assert payloads[-1] == b"[DONE]"
    parsed = [ChatCompletionChunk.model_validate(orjson.loads(p)) for p in payloads[:-1]]
    text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    assert text == "Hello world"
    assert parsed[-1].usage is not None and parsed[-1].usage.total_tokens == 5
    assert fold(payloads) == completion  # a round trip
    without = DataDecoder().feed(chunks(completion, include_usage=False))
    assert all(orjson.loads(p)["choices"] for p in without[:-1])


def test_storable_needs_every_choice_stopped_without_tools() -> None:
    completion = fold(STREAM)
    assert completion is not None and storable(completion)
    called = {**completion, "choices": [{**completion["choices"][0], "message": {
        "role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}}]}
    assert not storable(called)
    assert not storable({**completion, "choices": []})
