"""What `Recorder.add` hands the event log (services/eventlog/recorder.py; the log handle's
`record` makes them, services/eventlog/writer.py): one `StoredEvent` per event, its sequence
number, type and JSON exactly as encoded, alone or as a batch."""

from __future__ import annotations

from typing import cast

from proxy.services.eventlog.recorder import Recorder
from proxy.services.eventlog.writer import EventLogHub, LogHandle
from proxy.store.base import Store, StoredEvent


class _Hub:
    """What a log handle asks of its hub when it takes an event: nobody follows here, the
    flusher is awake."""

    locally_followed: frozenset[str] = frozenset()
    awake = True
    max_pending = 512

    def local(self, _rid: str, _event: StoredEvent) -> None:
        raise AssertionError("nobody follows here")

    def local_all(self, _rid: str, _events: list[StoredEvent]) -> None:
        pass

    def hurry(self, _handle: LogHandle) -> None:
        pass

    def wake(self, _pending: int) -> None:
        pass


def test_each_event_becomes_a_stored_event_as_encoded() -> None:
    handle = LogHandle(cast(EventLogHub, _Hub()), "resp_1")
    recorder = Recorder(cast(Store, None), "tenant", ttl=60, event_ttl=60, log_handle=handle)
    one = [{"type": "response.output_text.delta", "sequence_number": 7}]
    recorder.add(one, [("response.output_text.delta", b'{"a":1}')])
    batch = [{"type": "t", "sequence_number": n} for n in (8, 9)]
    recorder.add(batch, [("t", b"8"), ("t", b"9")])
    assert handle.pending == [StoredEvent(7, "response.output_text.delta", b'{"a":1}'),
                              StoredEvent(8, "t", b"8"), StoredEvent(9, "t", b"9")]
    # held as plain tuples (store/base.py `EventRow`), and read as named ones where followed
    assert all(type(e) is tuple for e in handle.pending)
    assert all(type(e) is StoredEvent for e in handle.recent)
    assert [(e.seq, e.type, e.data) for e in handle.recent][1] == (8, "t", b"8")
