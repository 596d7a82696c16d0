"""What `Recorder.add` hands the event log (services/eventlog/recorder.py): one `StoredEvent` per
event, its sequence number, type and JSON exactly as encoded, alone or as a batch."""

from __future__ import annotations

from typing import Any, cast

from proxy.services.eventlog.recorder import Recorder
from proxy.services.eventlog.writer import LogHandle
from proxy.store.base import Store, StoredEvent


class _Handle:
    def __init__(self) -> None:
        self.added: list[Any] = []

    def add(self, event: StoredEvent) -> None:
        self.added.append(event)

    def add_all(self, events: list[StoredEvent]) -> None:
        self.added.extend(events)


def test_each_event_becomes_a_stored_event_as_encoded() -> None:
    handle = _Handle()
    recorder = Recorder(cast(Store, None), "tenant", ttl=60, event_ttl=60,
                        log_handle=cast(LogHandle, handle))
    one = [{"type": "response.output_text.delta", "sequence_number": 7}]
    recorder.add(one, [("response.output_text.delta", b'{"a":1}')])
    batch = [{"type": "t", "sequence_number": n} for n in (8, 9)]
    recorder.add(batch, [("t", b"8"), ("t", b"9")])
    assert handle.added == [StoredEvent(7, "response.output_text.delta", b'{"a":1}'),
                            StoredEvent(8, "t", b"8"), StoredEvent(9, "t", b"9")]
    assert all(type(e) is StoredEvent for e in handle.added)
    assert [(e.seq, e.type, e.data) for e in handle.added][1] == (8, "t", b"8")
