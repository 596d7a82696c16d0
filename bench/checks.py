"""Byte-level stream checkers: a stream that is short, cut or wrongly ended is an error.

Measured: the number of content deltas of one response body (de-chunked HTTP body bytes, fed
in whatever pieces the socket delivered) and how the stream ends. No JSON is parsed; each piece
costs a concatenation with a short tail of the previous one, a `count` and (Responses) an
`rfind`, which keeps the load generator cheap at 12,800 events/s.

Chat Completions (`data: <json>` frames, orjson-compact as vLLM and the simulator write them):
  - a content delta is a `"delta":{"content":"<non-empty>"` (the role chunk carries
    `{"role":...,"content":""}` and an empty-content finish chunk is not a token);
  - the stream must end with `data: [DONE]`, carry `"finish_reason":"stop"` and no in-band
    `data: {"error"...` frame.
Responses (`event: <type>\\ndata: <json>` frames):
  - a delta is an `event: response.output_text.delta` line;
  - the last `event:` line of the stream must be `response.completed`.
In both, the delta count must equal the tokens asked for (`[[sim tokens=N]]`).
Whole JSON answers (`stream: false`, the `-json` kinds): the body is kept (bounded) and parsed
once at its end; it must be a completed answer (`finish_reason` "stop" / `status` "completed")
whose usage counts exactly the tokens asked for, which then count as its deltas.

Chunk boundaries: a pattern may straddle two pieces, so each piece is searched together with
the last `TAIL` bytes of the stream so far, and only matches that end inside the new piece are
counted (a match lying wholly inside the old tail was counted before). Event lines are found as
`\\n` + `event: `; JSON data lines cannot hold a raw newline, so a `"event: "` inside a string
never matches. The stream's first byte is preceded by a virtual `\\n`.
"""

from __future__ import annotations

from typing import Literal, Protocol

import orjson

StreamKind = Literal["chat", "responses", "chat-json", "responses-json"]

# Longer than any pattern and than one `event: <type>` line, so a split line is always
# completed in the next search.
TAIL = 128

CHAT_DELTA = b'"delta":{"content":'
CHAT_EMPTY_DELTA = b'"delta":{"content":""'
CHAT_STOP = b'"finish_reason":"stop"'
CHAT_ERROR = b'data: {"error"'
CHAT_DONE = b"data: [DONE]"

EVENT_LINE = b"\nevent: "
RESPONSES_DELTA = b"\nevent: response.output_text.delta\n"
RESPONSES_COMPLETED = b"response.completed"


def _new_matches(buf: bytes, pattern: bytes, old: int) -> int:
    """Matches of `pattern` in `buf` that end after its first `old` bytes."""
    return buf.count(pattern, max(0, old - len(pattern) + 1))


class StreamCheck(Protocol):
    """Feed body pieces in order; `deltas` is the running count of content deltas."""

    deltas: int

    def feed(self, data: bytes) -> None: ...

    def verdict(self, expected: int) -> str | None:
        """None if the stream is complete and has exactly `expected` deltas, else why not."""
        ...


class ChatCheck:
    __slots__ = ("_errors", "_stops", "_tail", "deltas")

    def __init__(self) -> None:
        self.deltas = 0
        self._tail = b"\n"
        self._stops = 0
        self._errors = 0

    def feed(self, data: bytes) -> None:
        old = len(self._tail)
        buf = self._tail + data
        self.deltas += (_new_matches(buf, CHAT_DELTA, old)
                        - _new_matches(buf, CHAT_EMPTY_DELTA, old))
        if CHAT_STOP in buf:
            self._stops += _new_matches(buf, CHAT_STOP, old)
        if CHAT_ERROR in buf:
            self._errors += _new_matches(buf, CHAT_ERROR, old)
        self._tail = buf[-TAIL:]

    def verdict(self, expected: int) -> str | None:
        if self._errors:
            return "in-band error frame"
        if self.deltas != expected:
            return f"{self.deltas} content deltas, expected {expected}"
        if not self._tail.rstrip(b"\r\n").endswith(CHAT_DONE):
            return "stream does not end with data: [DONE]"
        if self._stops != 1:
            return f"{self._stops} finish_reason stop, expected 1"
        return None


class ResponsesCheck:
    __slots__ = ("_tail", "deltas", "last_event")

    def __init__(self) -> None:
        self.deltas = 0
        self._tail = b"\n"
        self.last_event = b""

    def feed(self, data: bytes) -> None:
        old = len(self._tail)
        buf = self._tail + data
        self.deltas += _new_matches(buf, RESPONSES_DELTA, old)
        at = buf.rfind(EVENT_LINE)
        if at >= 0:
            start = at + len(EVENT_LINE)
            end = buf.find(b"\n", start)
            if end >= 0:
                self.last_event = buf[start:end].rstrip(b"\r")
        self._tail = buf[-TAIL:]

    def verdict(self, expected: int) -> str | None:
        if self.last_event != RESPONSES_COMPLETED:
            last = self.last_event.decode(errors="replace") or "none"
            return f"last event {last}, expected response.completed"
        if self.deltas != expected:
            return f"{self.deltas} output_text deltas, expected {expected}"
        return None


BODY_LIMIT = 256 * 1024  # of a whole JSON answer: a short answer is ~1-2 KiB


class JsonCheck:
    """A whole (non-streamed) answer, parsed once when it has ended."""

    __slots__ = ("_body", "_chat", "deltas")

    def __init__(self, chat: bool) -> None:
        self.deltas = 0
        self._body = b""
        self._chat = chat

    def feed(self, data: bytes) -> None:
        if len(self._body) < BODY_LIMIT:
            self._body += data

    def verdict(self, expected: int) -> str | None:
        try:
            answer = orjson.loads(self._body)
            if self._chat:
                done = answer["choices"][0]["finish_reason"] == "stop"
                tokens = answer["usage"]["completion_tokens"]
            else:
                done = answer["status"] == "completed"
                tokens = answer["usage"]["output_tokens"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return "not a whole JSON answer"
        if not done:
            return "answer not completed"
        if tokens != expected:
            return f"{tokens} output tokens, expected {expected}"
        self.deltas = tokens
        return None


def new_check(kind: StreamKind) -> StreamCheck:
    if kind == "chat":
        return ChatCheck()
    if kind == "responses":
        return ResponsesCheck()
    return JsonCheck(chat=kind == "chat-json")


def check_body(kind: StreamKind, body: bytes, expected: int, piece: int = 0) -> str | None:
    """Check a whole recorded body, fed in `piece`-byte pieces (0: at once)."""
    check = new_check(kind)
    if piece <= 0:
        check.feed(body)
    else:
        for at in range(0, len(body), piece):
            check.feed(body[at:at + piece])
    return check.verdict(expected)
