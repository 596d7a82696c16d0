"""Raw upstream bytes → Responses events: the SSE decoder and the assembler joined.

This is the whole per-chunk hot path minus I/O: split `data:` payloads, one `orjson.loads` each,
one `Assembler.feed`. The service reads bytes from the upstream and writes what comes out.
"""

from __future__ import annotations

import orjson

from proxy.core.events.assembler import Assembler
from proxy.core.events.sse import DONE, DataDecoder
from proxy.core.types import Event


class ChatStreamReader:
    __slots__ = ("assembler", "decoder")

    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler
        self.decoder = DataDecoder()

    def feed(self, raw: bytes) -> list[Event]:
        assembler = self.assembler
        events: list[Event] = []
        for payload in self.decoder.feed(raw):
            events.extend(self._payload(payload))
            if assembler.done:
                break
        return events

    def end(self) -> list[Event]:
        """The upstream body ended (cleanly, from the transport's point of view)."""
        events: list[Event] = []
        for payload in self.decoder.flush():
            events.extend(self._payload(payload))
        events.extend(self.assembler.end())
        return events

    def _payload(self, payload: bytes) -> list[Event]:
        if payload == DONE:
            return self.assembler.end()
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return self.assembler.fail("upstream sent a chunk that is not JSON")
        if not isinstance(chunk, dict):
            return self.assembler.fail("upstream sent a chunk that is not a JSON object")
        return self.assembler.feed(chunk)
