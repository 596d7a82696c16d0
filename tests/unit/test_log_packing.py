"""store/lua/packing.py `packed`: a run that fits one log entry is packed by its one-entry path
byte for byte as the entry loop packs it, and anything else (gaps, retried or reordered events,
an unknown type, the entry bounds) goes through the entry loop."""

from __future__ import annotations

import pytest

from proxy.store.base import StoredEvent
from proxy.store.lua import packing
from proxy.store.lua.packing import MAX_ENTRY_BYTES, MAX_EVENTS_PER_ENTRY, _entries, packed

DELTA = "response.output_text.delta"


def run(seqs: list[int], *, size: int = 40, kind: str = DELTA) -> list[StoredEvent]:
    return [StoredEvent(seq, kind, b'{"sequence_number":%d,"d":"%s"}' % (seq, b"x" * size))
            for seq in seqs]


CASES = {
    "one": run([7]),
    "two": run([0, 1]),
    "a held run": run(list(range(20, 35))),
    "a full entry": run(list(range(MAX_EVENTS_PER_ENTRY))),
    "one past the entry": run(list(range(MAX_EVENTS_PER_ENTRY + 1))),
    "a gap": run([1, 2, 4, 5]),
    "first and last apart by the count, out of order": run([1, 3, 2, 4]),
    "a retried event again": run([3, 3, 4]),
    "past the entry's bytes": run(list(range(10)), size=MAX_ENTRY_BYTES // 8),
    "one big event": run([5, 6], size=2 * MAX_ENTRY_BYTES),
    "mixed types": [*run([0], kind="response.created"), *run([1, 2]),
                    *run([3], kind="response.output_text.done")],
}


@pytest.mark.parametrize("name", list(CASES))
def test_packed_is_the_entry_loop_byte_for_byte(name: str) -> None:
    events = CASES[name]
    assert packed(events) == _entries(events)


def test_a_type_never_seen_is_packed_as_the_entry_loop_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "_TYPES", {})
    events = run([0, 1, 2], kind="response.some_new_event")
    assert packed(events) == b"0\x042\x04%s\x04%s\x04%s" % (
        b"\x01".join(b"response.some_new_event\x00" + e.data for e in events[:2]),
        b"response.some_new_event", events[2].data)
    assert packed(events) == _entries(events)


def test_a_held_run_is_one_entry() -> None:
    events = run(list(range(20, 35)))
    assert packed(events).count(b"\x03") == 0  # entries are joined by byte 3
    assert packed(events).split(b"\x04")[:2] == [b"20", b"34"]
