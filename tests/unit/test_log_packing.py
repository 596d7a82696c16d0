"""store/lua/packing.py: the entries `packed` and `stream_args` carry, pinned byte for byte
against the plain formatting of the earlier release (`reference`), for a run that is one entry
and for anything else (gaps, retried or reordered events, an unknown type, the entry bounds):
`packed` is that formatting, and the flush's arguments are its parts."""

from __future__ import annotations

import pytest

from proxy.store.base import StoredEvent
from proxy.store.lua import packing
from proxy.store.lua.packing import (
    MAX_ENTRY_BYTES,
    MAX_EVENTS_PER_ENTRY,
    entries,
    entry_length,
    hash_key,
    packed,
    stream_args,
)

DELTA = "response.output_text.delta"


def reference(events: list[StoredEvent]) -> bytes:
    """Entries formatted one by one, as the earlier release did."""
    entries: list[bytes] = []
    start = 0
    while start < len(events):
        first = events[start]
        seq, size, stop = first.seq, len(first.data), start + 1
        while stop < min(len(events), start + MAX_EVENTS_PER_ENTRY):
            event = events[stop]
            size += len(event.data)
            if event.seq != seq + 1 or size > MAX_ENTRY_BYTES:
                break
            seq, stop = event.seq, stop + 1
        end = events[stop - 1]
        records = b"\x01".join([b"%s\x00%s" % (e.type.encode(), e.data)
                                 for e in events[start:stop - 1]])
        entries.append(b"%d\x04%d\x04%s\x04%s\x04%s" % (first.seq, end.seq, records,
                                                        end.type.encode(), end.data))
        start = stop
    return b"\x03".join(entries)


def run(seqs: list[int], *, size: int = 40, kind: str = DELTA) -> list[StoredEvent]:
    return [StoredEvent(seq, kind, b'{"sequence_number":%d,"d":"%s"}' % (seq, b"x" * size))
            for seq in seqs]


CASES = {
    "none": [],
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
def test_packed_is_the_plain_formatting_byte_for_byte(name: str) -> None:
    events = CASES[name]
    assert packed(events) == reference(events)


def test_a_flush_call_is_each_stream_key_and_its_entries_parts() -> None:
    batches = {f"resp_{n}": events for n, events in enumerate(CASES.values()) if events}
    hashes, args = stream_args(batches)
    assert hashes == [hash_key(rid) for rid in batches]
    at = 0
    for rid, events in batches.items():
        count = args[at + 1]
        assert args[at] == hash_key(rid) and isinstance(count, int)
        parts = args[at + 2:at + 2 + 5 * count]
        assert b"\x03".join(b"%d\x04%d\x04%s\x04%s\x04%s" % tuple(parts[i:i + 5])
                             for i in range(0, len(parts), 5)) == reference(events)
        at += 2 + 5 * count
    assert at == len(args)


def test_a_type_never_seen_is_packed_as_any_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "_TYPES", {})
    events = run([0, 1, 2], kind="response.some_new_event")
    assert packed(events) == b"0\x042\x04%s\x04%s\x04%s" % (
        b"\x01".join(b"response.some_new_event\x00" + e.data for e in events[:2]),
        b"response.some_new_event", events[2].data)
    assert packed(events) == reference(events)


def test_a_held_run_is_one_entry() -> None:
    events = run(list(range(20, 35)))
    assert packed(events).count(b"\x03") == 0  # entries are joined by byte 3
    assert packed(events).split(b"\x04")[:2] == [b"20", b"34"]


@pytest.mark.parametrize("name", list(CASES))
def test_entry_length_is_the_first_entrys_count(name: str) -> None:
    events = CASES[name]
    first = entries(events)[0] if events else None
    # an entry's count: its records (byte 1 between them) and its last event
    want = 0 if first is None else (first[2].count(b"\x01") + 2 if first[2] else 1)
    assert entry_length(events) == want
