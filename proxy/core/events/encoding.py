"""Events to the JSON bytes that are sent and stored (core/types.py `EventBatch`): one
`orjson.dumps` an event, but the response object that a stream's first events share.

The start events (`response.created`, then `response.in_progress` or `response.queued`) carry
one and the same response object (the assembler's `start`): the largest JSON of a short
answer's first write, the whole request echo. It is encoded once and each event's bytes are
made around it, byte for byte what `orjson.dumps` makes of the event (orjson writes a dict's
keys in order with no spaces, and these events are exactly `type`, `sequence_number`,
`response`, with a type that needs no escape): ~1.2 µs less before a stream's first byte.
"""

from __future__ import annotations

import orjson

from proxy.core.types import CREATED, IN_PROGRESS, TERMINAL_EVENTS, Event, EventBatch


def encode_events(events: list[Event]) -> EventBatch:
    """`events` as (type, JSON) pairs."""
    dumps = orjson.dumps
    if len(events) > 1:
        first, second = events[0], events[1]
        response = first.get("response")
        if response is not None and second.get("response") is response \
                and len(first) == len(second) == 3:
            body = dumps(response)
            return [_around(first, body), _around(second, body),
                    *[(event["type"], dumps(event)) for event in events[2:]]]
    return [(event["type"], dumps(event)) for event in events]


def ends_stream(batch: EventBatch) -> bool:
    """The batch ends with the stream's terminal event: nothing follows it."""
    return bool(batch) and batch[-1][0] in TERMINAL_EVENTS


def _around(event: Event, body: bytes) -> tuple[str, bytes]:
    kind = event["type"]
    return kind, lifecycle(kind, event["sequence_number"], body)


def lifecycle(kind: str, seq: int, body: bytes | memoryview) -> bytes:
    """The JSON of a lifecycle event numbered `seq` around its response object's JSON `body`:
    byte for byte `orjson.dumps` of the event (see the module's docstring)."""
    return b'{"type":"%s","sequence_number":%d,"response":%s}' % (kind.encode(), seq, body)


def foreground_start(body: bytes) -> list[tuple[int, str, bytes]]:
    """A foreground stream's first two events (`Assembler.start`) as they are sent and logged,
    numbered, around the create-time object's JSON `body`: what a reader makes them from while
    the stream's writer still holds them (services/responses/stored.py, eventlog/ending.py)."""
    return [(seq, kind, lifecycle(kind, seq, body))
            for seq, kind in ((0, CREATED), (1, IN_PROGRESS))]
