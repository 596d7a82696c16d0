"""store/lua/packing.py: the entries `packed` and `stream_args` carry, pinned byte for byte
against the plain formatting of the earlier release (`reference`), for a run that is one entry
and for anything else (gaps, retried or reordered events, an unknown type, the entry bounds):
`packed` is that formatting, and the flush's arguments are its parts."""

from __future__ import annotations

from itertools import pairwise

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.store import keys
from proxy.store.base import EventRun, StoredEvent
from proxy.store.lua import packing
from proxy.store.lua.decoding import events_of
from proxy.store.lua.packing import (
    MAX_ENTRY_BYTES,
    MAX_EVENTS_PER_ENTRY,
    entries,
    first_entry,
    hash_key,
    packed,
    run_columns,
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


def as_run(events: list[StoredEvent]) -> EventRun | None:
    """`events` as the writer hands them over (services/eventlog/writer.py), if they are
    numbered one after another (else None: the writer never holds such)."""
    if any(b.seq != a.seq + 1 for a, b in pairwise(events)):
        return None
    return EventRun(events[0].seq if events else 0, [(e.type, e.data) for e in events])


RUNS = [name for name, events in CASES.items() if as_run(events) is not None]


@pytest.mark.parametrize("name", RUNS)
def test_first_entry_is_the_first_entrys_count_and_length(name: str) -> None:
    events = CASES[name]
    first = entries(events)[0] if events else None
    # an entry's count: its records (byte 1 between them) and its last event
    want = 0 if first is None else (first[2].count(b"\x01") + 2 if first[2] else 1)
    columns = run_columns([(e.type, e.data) for e in events])
    assert columns[2] == sum(len(e.data) for e in events)
    assert first_entry(columns) == (want, sum(len(e.data) for e in events[:want]))


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("name", RUNS)
def test_a_run_as_the_writer_holds_it_packs_as_its_numbered_events(name: str,
                                                                    compact: bool) -> None:
    events = CASES[name]
    held = as_run(events)
    assert held is not None and held == events and list(held) == events
    assert entries(held, compact=compact) == entries(events, compact=compact)
    # and with the columns its writer made already (to size a held run's entry)
    columns = run_columns(held.rows)
    assert entries(EventRun(held.first, held.rows, columns), compact=compact) == entries(
        events, compact=compact)
    assert stream_args({"resp_1": held}, compact=compact) == stream_args({"resp_1": events},
                                                                         compact=compact)


# -- compact runs of deltas (packing.py `records`, read back by decoding.py `events_of`) ------

TYPES = [DELTA, "response.reasoning_text.delta", "response.function_call_arguments.delta",
         "response.output_text.done", "response.content_part.done"]


def delta(seq: int, text: str = " tok", *, item: str = "msg_0a1b", kind: str = DELTA,
          logprobs: list[object] | None = None, index: int = 0) -> StoredEvent:
    """An event shaped as the assembler makes it (core/events/assembler/text.py)."""
    body: dict[str, object] = {"type": kind, "sequence_number": seq, "item_id": item,
                               "output_index": index, "content_index": 0, "delta": text}
    if kind == DELTA:
        body["logprobs"] = logprobs or []
    return StoredEvent(seq, kind, orjson.dumps(body))


def read_back(events: list[StoredEvent]) -> list[StoredEvent]:
    """Every entry `entries` makes of `events`, as the store keeps it (fields t, d and c) and
    as a reader decodes it."""
    got: list[StoredEvent] = []
    for _first, last, earlier, kind, data in entries(events, compact=True):
        fields = {b"t": kind, b"d": data, **({keys.E_EARLIER: earlier} if earlier else {})}
        got += events_of(b"1-%d" % last, fields)
    return got


def test_a_held_run_of_deltas_is_compact_and_reads_back_byte_for_byte() -> None:
    events = [delta(seq, f" word{seq}") for seq in range(100, 100 + MAX_EVENTS_PER_ENTRY)]
    (entry,) = entries(events, compact=True)
    raw = sum(len(e.type) + 1 + len(e.data) + 1 for e in events[:-1])
    assert entry[2].count(b"\x05") == len(events) - 1  # every earlier record compact
    assert len(entry[2]) * 5 < raw  # ~28 bytes a record against ~190
    assert read_back(events) == events
    for after in range(99, 100 + MAX_EVENTS_PER_ENTRY):  # from any number, mid-entry included
        fields = {b"t": entry[3], b"d": entry[4], keys.E_EARLIER: entry[2]}
        assert events_of(b"1-%d" % entry[1], fields, after) == [
            e for e in events if e.seq > after]


def test_a_run_whose_numbers_gain_a_digit_is_compact_on_both_sides() -> None:
    # One cut for each width of number: 95-99, then 100 on.
    events = [delta(seq) for seq in range(95, 120)]
    (entry,) = entries(events, compact=True)
    assert entry[2].count(b"\x05") == 24
    assert read_back(events) == events


def test_a_run_of_deltas_then_other_events_keeps_those_in_full() -> None:
    events = [*[delta(seq) for seq in range(13, 33)],
              StoredEvent(33, "response.output_text.done", b'{"type":"response.output_text.done"'
                                                              b',"sequence_number":33,"text":"x"}'),
              delta(34)]
    (entry,) = entries(events, compact=True)
    assert entry[2].count(b"\x05") == 20 and b"response.output_text.done\x00" in entry[2]
    assert read_back(events) == events


def other(seq: int, kind: str) -> StoredEvent:
    return StoredEvent(seq, kind, b'{"type":"%s","sequence_number":%d,"item":{}}'
                       % (kind.encode(), seq))


def test_a_stream_first_entry_keeps_its_start_in_full_and_its_deltas_compact() -> None:
    # a stored stream's first flush: its start, its item's and its part's, then its tokens
    start = [other(0, "response.created"), other(1, "response.in_progress"),
             other(2, "response.output_item.added"), other(3, "response.content_part.added")]
    events = [*start, *[delta(seq) for seq in range(4, 44)]]
    (entry,) = entries(events, compact=True)
    assert entry[2].count(b"\x05") == 39  # the deltas but the entry's last
    assert entry[2].startswith(b"response.created\x00")
    assert read_back(events) == events
    for after in range(-1, 44):  # from any number, mid-entry included
        fields = {b"t": entry[3], b"d": entry[4], keys.E_EARLIER: entry[2]}
        assert events_of(b"1-%d" % entry[1], fields, after) == [
            e for e in events if e.seq > after]
    # past `MAX_LEAD` events before them, the deltas are stored in full
    lead = [other(n, "response.output_item.added") for n in range(packing.MAX_LEAD + 1)]
    events = [*lead, *[delta(seq) for seq in range(len(lead), len(lead) + 30)]]
    (entry,) = entries(events, compact=True)
    assert b"\x05" not in entry[2] and read_back(events) == events


def test_a_run_too_short_to_pay_for_its_cut_is_stored_in_full() -> None:
    events = [delta(seq) for seq in range(13, 13 + packing.MIN_COMPACT_RUN)]  # one run fewer
    (entry,) = entries(events, compact=True)
    assert b"\x05" not in entry[2] and b"\x07" not in entry[2]
    assert read_back(events) == events


@pytest.mark.parametrize("events", [
    [delta(1, item="msg_a"), delta(2, item="msg_b"), delta(3, item="msg_b")],  # two items
    [delta(1), delta(2, index=1), delta(3)],  # another output index
    [StoredEvent(n, DELTA, b'{"type":"%s","sequence_number":%d,"delta":"x"}'
                 % (DELTA.encode(), n)) for n in range(1, 5)],  # not the item's shape
    [StoredEvent(n, DELTA, b'{"sequence_number":%d}' % n) for n in range(1, 5)],
], ids=["items", "index", "no item", "no type"])
def test_a_run_not_of_one_shape_is_stored_in_full_or_compact_only_where_it_matches(
        events: list[StoredEvent]) -> None:
    assert read_back(events) == events


def test_a_template_with_a_percent_sign_and_escapes_reads_back() -> None:
    events = [delta(n, text, item="msg_%d%s%%") for n, text in
              enumerate(["a\u0007b", '"q"', "\\", "é€😀", "%d %s", "", "\n"], 7)]
    assert read_back(events) == events


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=100_000),
       st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(["msg_1", "rs_2", "fc%"]),
                          st.text(max_size=12), st.booleans()), min_size=1, max_size=120))
def test_any_run_of_events_reads_back_as_it_was_written(
        start: int, specs: list[tuple[str, str, str, bool]]) -> None:
    events = []
    for seq, (kind, item, text, logprobs) in enumerate(specs, start):
        if kind.endswith(".delta"):
            events.append(delta(seq, text, item=item, kind=kind,
                                logprobs=[{"token": text, "logprob": -0.5}] if logprobs else None))
        else:
            events.append(StoredEvent(seq, kind, orjson.dumps(
                {"type": kind, "sequence_number": seq, "item_id": item, "text": text})))
    assert read_back(events) == events
    held = as_run(events)
    assert held is not None and entries(held, compact=True) == entries(events, compact=True)


def test_without_compact_a_run_of_deltas_is_stored_in_full_as_earlier_releases_did() -> None:
    # `--event-log-format full` (a release before c405424 beside this one); `entries`' own
    # default, the store passing its setting
    events = [delta(seq) for seq in range(100, 100 + MAX_EVENTS_PER_ENTRY)]
    (entry,) = entries(events)
    assert entry == entries(events, compact=False)[0]
    assert b"\x05" not in entry[2] and b"\x07" not in entry[2]
    assert packed(events) == reference(events)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10_000),
       st.lists(st.sampled_from([DELTA, "response.created", "response.output_text.done"]),
                min_size=1, max_size=2 * MAX_EVENTS_PER_ENTRY))
def test_any_mix_of_types_is_packed_in_full_as_formatted_one_by_one(
        start: int, kinds: list[str]) -> None:
    # runs of one type take a join of their own (packing.py `_joined`), mixes the pieces
    events = [StoredEvent(seq, kind, b'{"type":"%s","n":%d}' % (kind.encode(), seq))
              for seq, kind in enumerate(kinds, start)]
    assert packed(events) == reference(events)
