"""Server-sent events, both directions.

Out: `event: <type>\\ndata: <one-line JSON>\\n\\n`, serialized once with orjson. The JSON bytes
are what the event log stores, so a replay frames the very same bytes (identical events,
identical sequence numbers).

In: `DataDecoder` cuts an upstream byte stream into the payloads of its `data:` fields, following
the SSE rules that matter for vLLM (CRLF or LF line ends, several `data:` lines joined by `\\n`,
comments and other fields ignored), without decoding bytes to str first.
"""

from __future__ import annotations

PING = b": ping\n\n"
DONE = b"[DONE]"


def frame(event_type: str, data: bytes) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + data + b"\n\n"


def frames(encoded: list[tuple[str, bytes]]) -> bytes:
    """Several (type, JSON) events as one write. `frame` spelled inline: this runs once per
    upstream read on the hot path, and a call per event would cost more than the framing."""
    return b"".join([b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
                     for kind, data in encoded])


class DataDecoder:
    """Feed raw bytes, get complete `data:` payloads (bytes) in order."""

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # an unfinished line waits for the next chunk
        out: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(self._data[0] if len(self._data) == 1 else b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return out

    def flush(self) -> list[bytes]:
        """At end of stream: an event without its closing blank line still counts."""
        rest = self.feed(b"\n\n") if self._buffer or self._data else []
        self._buffer = b""
        return rest
