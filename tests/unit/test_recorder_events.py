"""What `Recorder.add` hands the event log (services/eventlog/recorder.py; the log handle's
`record` keeps them, services/eventlog/writer.py): each event's type and JSON exactly as
encoded, alone or as a batch, numbered from the batch's own sequence numbers."""

from __future__ import annotations

from typing import cast

from proxy.services.eventlog.recorder import Recorder
from proxy.services.eventlog.writer import EventLogHub, LogHandle
from proxy.store.base import Store, StoredEvent


class _Hub:
    """What a log handle asks of its hub when it takes an event nobody here follows."""

    def local(self, _rid: str, _event: StoredEvent) -> None:
        raise AssertionError("nobody follows here")

    def local_all(self, _rid: str, _events: list[StoredEvent]) -> None:
        raise AssertionError("nobody follows here")

    def hurry(self, _handle: LogHandle) -> None:
        pass

    def wake(self) -> None:
        pass

    def flush_soon(self) -> None:
        raise AssertionError("far below the buffer's bound")


def test_each_event_becomes_a_stored_event_as_encoded() -> None:
    handle = LogHandle(cast(EventLogHub, _Hub()), "resp_1")
    recorder = Recorder(cast(Store, None), "tenant", ttl=60, event_ttl=60, log_handle=handle)
    one = [{"type": "response.output_text.delta", "sequence_number": 7}]
    first = [("response.output_text.delta", b'{"a":1}')]
    recorder.add(one, first)
    batch = [{"type": "t", "sequence_number": n} for n in (8, 9)]
    recorder.add(batch, [("t", b"8"), ("t", b"9")])
    assert handle.pending == [StoredEvent(7, "response.output_text.delta", b'{"a":1}'),
                              StoredEvent(8, "t", b"8"), StoredEvent(9, "t", b"9")]
    # kept as the pairs the turn encoded (no copy a token), numbered when read or written
    assert handle.rows[0] is first[0]
    assert all(type(e) is StoredEvent for e in handle.recent)
    assert [(e.seq, e.type, e.data) for e in handle.recent][1] == (8, "t", b"8")


def test_a_batch_numbered_out_of_turn_gives_the_log_up_rather_than_misnumber_it() -> None:
    handle = LogHandle(cast(EventLogHub, _Hub()), "resp_1")
    handle.record([{"sequence_number": 3}], [("t", b"3")])
    handle.record([{"sequence_number": 5}], [("t", b"5")])  # event 4 never came here
    assert handle.pending == [StoredEvent(3, "t", b"3"), StoredEvent(4, "t", b"5")]
    assert not handle._checked()  # what a write asks before it takes them
    assert handle.broken and handle.pending == []
