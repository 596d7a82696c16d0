"""Raw upstream bytes → Responses events: the SSE decoder and the assembler joined.

This is the whole per-chunk hot path minus I/O: split `data:` payloads, one `orjson.loads` each,
one `Assembler.feed`. The service reads bytes from the upstream and writes what comes out.
"""

from __future__ import annotations

import orjson

from proxy.core.events.assembler import Assembler, Phase
from proxy.core.events.sse import DONE, DataDecoder
from proxy.core.types import Event

_DONE = Phase.DONE  # bound once: an enum member's lookup is ~60 ns, this runs per chunk
_NOT_JSON = object()  # what a payload that does not parse stands for


class ChatStreamReader:
    __slots__ = ("assembler", "decoder")

    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler
        self.decoder = DataDecoder()

    def feed(self, raw: bytes) -> list[Event]:
        # One frame per payload, the chunk's own handling inlined (`_payload`, what `end`
        # uses): a call less per upstream chunk, and the phase read straight rather than
        # through `done` (~0.3 µs a chunk: a 16-token answer's 20 chunks, ~6 µs).
        assembler = self.assembler
        feed = assembler.feed
        events: list[Event] = []
        for payload in self.decoder.feed(raw):
            if payload == DONE:
                events += assembler.end()
            else:
                try:
                    chunk = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    chunk = _NOT_JSON
                events += feed(chunk) if type(chunk) is dict else self._not_a_chunk(chunk)
            if assembler.phase is _DONE:
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
            chunk = _NOT_JSON
        return self.assembler.feed(chunk) if type(chunk) is dict else self._not_a_chunk(chunk)

    def _not_a_chunk(self, chunk: object) -> list[Event]:
        """A payload that is no chunk (`_NOT_JSON`: not JSON at all)."""
        if chunk is _NOT_JSON:
            return self.assembler.fail("upstream sent a chunk that is not JSON")
        return self.assembler.fail("upstream sent a chunk that is not a JSON object")
