"""How events travel to the append scripts (scripts.py): as the log entries they become, the
flush cut into calls of bounded size and, on a Redis Cluster, one call per shard tag.

A log entry holds several events (keys.py, "the event log"): the run of consecutive sequence
numbers one write carries for a stream, cut at `MAX_EVENTS_PER_ENTRY` events or
`MAX_ENTRY_BYTES` bytes (one bigger event stands alone). The script then runs one XADD per
entry, whatever its number of events: at 20 ms per token a flush carries a few events of every
live stream, and one XADD and one parse per event was most of Redis's per-token work on the
stored path.

An entry is the earlier release's entry of its last event (id `1-<seq>`, fields `t` type and
`d` JSON) with, when the run holds more, the events before it (`records`): in field `e`,
`<type> 0x00 <JSON>` each, joined by byte 1, as releases before c405424 wrote them; or in field `c`
when a run of deltas among them is kept compact. So an entry of one event is exactly what the
earlier releases wrote, and one of their readers meeting a longer entry it cannot read sees a
gap (it then rebuilds a finished response's replay from its final object) rather than failing.

Compact deltas. A stream sends one delta a token, and most of each delta's ~190 bytes repeat the
one before: its type (twice: the record's and the JSON's), the item's id and indices, the empty
logprobs. Redis pays for every byte a script is given (its Lua hashes each byte of every string,
~10 instructions a byte), and keeps them for the log's life. So a run of an entry's earlier
records that are deltas of one type and one item (the run's first event's start, with each
event's own number, checked event by event; after at most a few others, in full: a stream's
first entry starts with its start and its item's, `_delta_run`; readers take each record by
its first byte, wherever it is) is kept as byte 5 and the rest of each event's
JSON past its start (the delta and what follows it: ~25 bytes for a text delta), and the records
end with byte 7, the run's type, byte 0 and the item's part of the start (between the number and
the delta, `"delta":` included): `{"type":"<type>","sequence_number":<n>` + that + the rest is
each event's JSON again, byte for byte (decoding.py `_earlier`). Bytes 5 and 7 never occur in
JSON (which escapes every control character) nor in a type. The script writes records ending
with a template (with `"delta":`; records in full end with `}`) to field `c`, counted apart
(keys.py `F_MORE`), others to `e`. With `compact` (`--event-log-format`, the default); `full`
writes none, for a release before c405424 beside this one, which reads `e` alone (keys.py says
what it would lose).

Two ways to carry entries to a script. The create and the final write take them packed into one
argument (`packed`): an entry is `<first seq> 4 <last seq> 4 <earlier records> 4 <last type> 4
<last JSON>`, a stream's entries joined by byte 3; none of the bytes 0-4 can occur inside (JSON
escapes every control character, types and numbers are plain ASCII), and the script stores the
parts as ranges of its argument. The flush (APPEND_EVENTS_MANY, a flush's hot path) takes each
entry's five parts as arguments of their own (`stream_args`): Redis hashes every byte of every
string a script makes, so parts cut out of one argument were hashed twice (scripts.py says
more).
The final write may also mark its first and last entries with events held by reference to the
record's objects (fields h and f: keys.py, "the event log's references"; references.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, chain, repeat
from operator import itemgetter
from typing import TypeVar

from proxy.core.shardtags import tag_of
from proxy.core.types import (
    ARGS_DELTA,
    CUSTOM_INPUT_DELTA,
    REASONING_DELTA,
    SUMMARY_DELTA,
    TEXT_DELTA,
)
from proxy.store import keys
from proxy.store.base import EventRow, EventRun, RunColumns

V = TypeVar("V")

# Bounds of one log entry: a reader's page (pages.py) is a count of entries, and an entry is
# never split on read, so these bound a page's reply (256 entries of at most 8 KiB, or one
# event each when events are bigger: 2 MiB). 48 events of ~175 bytes (a text delta) fill
# 8 KiB: what a 20 ms/token stream nobody else follows gathers in the writer's hold
# (services/eventlog/writer.py `HOLD_WINDOWS`), and what a zero-delay burst's backlog is cut
# into. Redis's work per entry (the flush script's HMGET, XADD, HSET and EXPIRE and its steps
# around them) was most of its CPU per stored token at 16 events and 4 KiB an entry: at 48
# and 8 KiB, 4.9 -> 3.7 ms of Redis CPU per 1,000 stored tokens (128 streams x 20 ms/token).
MAX_EVENTS_PER_ENTRY = 48
MAX_ENTRY_BYTES = 8192

# Event types as bytes: a dozen distinct strings, encoded once instead of once per event.
_TYPES: dict[str, bytes] = {}


def _type_bytes(kind: str) -> bytes:
    encoded = _TYPES.get(kind)
    if encoded is None:
        if len(_TYPES) >= 256:  # bounded whatever types come (they are a fixed set today)
            _TYPES.clear()
        encoded = _TYPES[kind] = kind.encode()
    return encoded


def packed(events: Sequence[EventRow], *, compact: bool = False) -> bytes:
    """Events (in the order given) as one script argument: the log entries they become. A new
    entry starts wherever the numbers are not consecutive (a retried batch, an older event: the
    script skips what the log already has, entry by entry) and at the entry bounds."""
    return b"\x03".join([b"%d\x04%d\x04%s\x04%s\x04%s" % entry
                         for entry in entries(events, compact=compact)])


# An entry's parts: its first and last sequence numbers, its earlier records (`<type> 0x00
# <JSON>` joined by byte 1; empty for none), its last event's type and JSON.
Entry = tuple[int, int, bytes, bytes, bytes]

_NUL, _SOH = b"\x00", b"\x01"
# A compact record starts with byte 5; the template its run is made from follows the records
# after byte 7 (see the module's docstring).
_COMPACT, _TEMPLATE = b"\x05", b"\x07"
_SOH_COMPACT = _SOH + _COMPACT
# The event types a run of which is stored compact: those a stream sends one of per token.
DELTA_TYPES = frozenset({TEXT_DELTA, REASONING_DELTA, ARGS_DELTA, CUSTOM_INPUT_DELTA,
                         SUMMARY_DELTA})
# A run shorter than this is stored in full: cutting and checking a run costs the proxy ~14k
# instructions an entry (its Python steps) and ~1.5k an event (three C passes), and saves Redis
# ~3k an event (~5k in a final write, whose argument the script cuts and so hashes twice). From
# 16 on: the long streams' entries (a held run is ~45 deltas) are cut, and a short answer's
# final write (up to ~15 deltas) costs the proxy what it did (`bench.instructions` read +61k
# instructions a stored 16-token answer with runs of 8 cut, for 44k less in Redis).
MIN_COMPACT_RUN = 16
# Events an entry's compact run may follow (its records before it in full): a stored stream's
# first entry holds its start (`response.created`, `response.in_progress`), its item's and its
# content part's before the first delta; a reasoning item's, a little more.
MAX_LEAD = 8
# Each delta type's events begin so, then their number (packing.py `_template`).
_LEADS = {kind: b'{"type":"%s","sequence_number":' % kind.encode() for kind in DELTA_TYPES}


def entries(events: Sequence[EventRow], *, compact: bool = False) -> list[Entry]:
    """The log entries `events` become (see `packed`), as their parts."""
    count = len(events)
    if not count:
        return []
    if type(events) is EventRun:
        return _run_entries(events, compact)
    if count <= MAX_EVENTS_PER_ENTRY:
        # A run within the bounds, ascending with no gap (a final write's, nearly always):
        # one entry, laid out by C loops over its columns (no Python step per event).
        seqs, kinds, datas = zip(*events, strict=True)
        first = seqs[0]
        if seqs == tuple(range(first, first + count)) \
                and sum(map(len, datas)) <= MAX_ENTRY_BYTES:
            return [entry_parts(first, seqs[-1], kinds, datas, compact=compact)]
    found: list[Entry] = []
    start = 0
    while start < count:  # one entry per round
        first_seq, _kind, first_data = events[start]
        seq, size, stop = first_seq, len(first_data), start + 1
        limit = min(count, start + MAX_EVENTS_PER_ENTRY)
        while stop < limit:
            next_seq, _kind, data = events[stop]
            size += len(data)
            if next_seq != seq + 1 or size > MAX_ENTRY_BYTES:
                break
            seq = next_seq
            stop += 1
        run = events[start:stop]
        found.append(entry_parts(first_seq, seq, [e[1] for e in run], [e[2] for e in run],
                                 compact=compact))
        start = stop
    return found


def _run_entries(run: EventRun, compact: bool) -> list[Entry]:
    """`entries` of the writer's run (numbered one after another by making): by C loops over
    its columns, the cuts found on the running total of its sizes (no Python step an event,
    a backlog's too)."""
    kinds, datas, size = run.columns or run_columns(run.rows)
    count, first = len(datas), run.first
    if count <= MAX_EVENTS_PER_ENTRY and size <= MAX_ENTRY_BYTES:  # a held run: nearly always
        return [entry_parts(first, first + count - 1, kinds, datas, compact=compact)]
    ends = list(accumulate(map(len, datas)))
    found: list[Entry] = []
    start = 0
    while start < count:  # one entry per round
        base = ends[start - 1] if start else 0
        stop = max(start + 1, bisect_right(ends, base + MAX_ENTRY_BYTES, start,
                                           min(count, start + MAX_EVENTS_PER_ENTRY)))
        found.append(entry_parts(first + start, first + stop - 1, kinds[start:stop],
                                 datas[start:stop], compact=compact))
        start = stop
    return found


def run_columns(rows: Sequence[tuple[str, bytes]]) -> RunColumns:
    """A stream's pending events (type, JSON) by column, with the JSONs' total length."""
    kinds, datas = zip(*rows, strict=True) if rows else ((), ())
    # The total as the length of their join: one copy of a few kilobytes, where `len` an event
    # summed cost ~120 instructions an event more (the join is freed at once).
    return kinds, datas, len(b"".join(datas))


def first_entry(columns: RunColumns) -> tuple[int, int]:
    """How many of the events of `columns`, numbered on with no gap, make their first log
    entry (`entries`' cut), and their JSONs' length: within the bounds, all of them; else the
    count bound, then events off the end until the bytes fit (a held run passes them by a few
    events: a Python step each of those, not of every event)."""
    _kinds, datas, size = columns
    stop = len(datas)
    if stop > MAX_EVENTS_PER_ENTRY:
        stop = MAX_EVENTS_PER_ENTRY
        size = sum(map(len, datas[:stop]))
    while size > MAX_ENTRY_BYTES and stop > 1:  # one bigger event stands alone
        stop -= 1
        size -= len(datas[stop])
    return stop, size


def entry_parts(first: int, last: int, kinds: Sequence[str], datas: Sequence[bytes], *,
                compact: bool = False) -> Entry:
    """The entry of the events `kinds`/`datas` (by column), numbered `first` to `last`;
    `compact`: a run of deltas kept compact (`--event-log-format compact`, the default), else
    all in full."""
    if len(datas) == 1:
        return first, last, b"", _type_bytes(kinds[0]), datas[0]
    earlier = records(first, kinds, datas) if compact else _joined(kinds[:-1], datas[:-1])
    return first, last, earlier, _type_bytes(kinds[-1]), datas[-1]


def records(first: int, kinds: Sequence[str], datas: Sequence[bytes]) -> bytes:
    """An entry's earlier records (the events but its last, numbered from `first`): a run of
    deltas of one type and item compact (see the module's docstring), the events before it
    (an item's start: its `output_item.added`, its part's) and after it in full. C loops over
    the columns (`map`, joins, compares): no Python step per event."""
    count = len(datas) - 1
    lo, hi = _delta_run(kinds, count)
    template = _template(first + lo, kinds[lo], datas[lo]) if hi else None
    if template is None:
        return _joined(kinds[:count], datas[:count])
    lead, item = template
    rests: list[bytes] = []
    done = lo
    while done < hi:  # one round per width of number (two at most in an entry)
        size = _compact(first + done, lead, item, datas[done:hi], rests)
        if not size:
            break
        done += size
    if done - lo < 2:
        return _joined(kinds[:count], datas[:count])
    before = (_joined(kinds[:lo], datas[:lo]), _SOH) if lo else ()
    after = (_SOH, _joined(kinds[done:count], datas[done:count])) if done < count else ()
    return b"".join((*before, _COMPACT, _SOH_COMPACT.join(rests), *after, _TEMPLATE,
                     _type_bytes(kinds[lo]), _NUL, item))


def _template(first: int, kind: str, data: bytes) -> tuple[bytes, bytes] | None:
    """For a delta event numbered `first`: its type's lead (the JSON up to the number) and its
    item's part (from the number to the delta, `"delta":` included); None when it has no delta.
    Whether the event does start with the lead and the number, `_compact` checks with the
    rest of the run."""
    lead = _LEADS[kind]
    start = len(lead) + len(b"%d" % first)
    end = data.find(b'"delta":', start)
    if end < 0:
        return None
    return lead, data[start:end + 8]


def _compact(first: int, lead: bytes, item: bytes, run: Sequence[bytes],
             rests: list[bytes]) -> int:
    """The events of `run` numbered from `first` whose numbers are as wide as the first's, as
    compact records added to `rests`: how many (0: they are not all shaped so, nothing added).
    Checked as a whole: each starts with the lead and holds the item's part right after its
    number (a run of two items' deltas, or of another key order, is stored in full). The
    numbers are the events' own (the writer numbers a stored event from the batch it encoded
    and checks that against the batch: services/eventlog/writer.py); the first's and the
    last's are checked. (The parts compared as two joins of slices: `bytes.startswith` an
    event, whose arguments are parsed at each call, cost ~400 instructions an event more.)"""
    number = b"%d" % first
    at = len(lead)
    start = at + len(number)
    cut = start + len(item)
    size: int = min(len(run), 10 ** len(number) - first)  # one width of number: one cut
    if size < len(run):
        run = run[:size]
    if run[0][at:start] != number or run[-1][at:start] != b"%d" % (first + size - 1) \
            or b"".join(map(itemgetter(slice(0, at)), run)) != lead * size \
            or b"".join(map(itemgetter(slice(start, cut)), run)) != item * size:
        return 0
    rests += map(itemgetter(slice(cut, None)), run)
    return size


def _joined(kinds: Sequence[str], datas: Sequence[bytes]) -> bytes:
    """Records in full, `<type> 0x00 <JSON>` joined by byte 1: one join over the pieces (each
    record's bytes copied once)."""
    kind = kinds[0]
    if kinds.count(kind) == len(kinds):
        # All of one type (a held run of deltas, nearly always): the JSONs joined by the type's
        # separator, with no piece per event (0.85 against 5.4 µs an entry of 47 deltas).
        head = _type_bytes(kind)
        return b"%s\x00%s" % (head, (b"\x01%s\x00" % head).join(datas))
    try:
        heads = list(map(_TYPES.__getitem__, kinds))
    except KeyError:  # a type not seen yet (the first of each kind)
        heads = [_type_bytes(kind) for kind in kinds]
    pieces = list(chain.from_iterable(zip(heads, repeat(_NUL), datas, repeat(_SOH))))
    pieces.pop()
    return b"".join(pieces)


def _delta_run(kinds: Sequence[str], count: int) -> tuple[int, int]:
    """Where among the first `count` events the run of deltas to keep compact lies, (start,
    stop): its type's first event, after at most `MAX_LEAD` others (a stream's first entry
    begins with its start and its item's, then its deltas), to that type's last, all of them
    that type ((0, 0): none, or one shorter than `MIN_COMPACT_RUN`). By C loops but for the
    few events before it: the run is the rest of the entry (a held run) or, before the
    turn's done events in a final write, up to the type's last event (any other mix: none)."""
    start = 0
    while kinds[start] not in DELTA_TYPES:
        start += 1
        if start > MAX_LEAD or start >= count:
            return 0, 0
    kind = kinds[start]
    earlier = kinds[start:count]
    size = len(earlier)
    if earlier.count(kind) != size:
        size -= earlier[::-1].index(kind)
        if earlier[:size].count(kind) != size:
            return 0, 0
    return (start, start + size) if size >= MIN_COMPACT_RUN else (0, 0)


# Events one APPEND_EVENTS_MANY call carries at most. Redis runs a script to its end before
# anything else: a flush that grew large (the store slow, a backlog) would otherwise stall
# every other client (creates, leases, final writes) for as long as it runs, and they in turn
# let the next backlog grow. About 2 ms of Redis at this size (bench/appends.py).
MAX_EVENTS_PER_CALL = 256


def by_tag(batches: Mapping[str, V]) -> dict[str | None, dict[str, V]]:
    """Per-response values by shard tag (core/shardtags.py): one call per tag."""
    parts: dict[str | None, dict[str, V]] = {}
    for rid, events in batches.items():
        parts.setdefault(tag_of(rid), {})[rid] = events
    return parts


def hash_key(response_id: str) -> bytes:
    return keys.response(response_id).encode()


class HashKeys(dict[str, bytes]):
    """`hash_key`, remembered for the live streams: a flush names every live stream's key, and
    working it out per flush (the shard tag read from the id, the key formatted and encoded)
    cost the one-primary flush ~14% more proxy CPU than the bare id it sent before (256
    streams, an event each); a dict hit costs what `rid.encode()` did. Bounded: forgotten whole
    past `bound` ids (far more than one process streams at once)."""

    def __init__(self, bound: int = 8192) -> None:
        super().__init__()
        self._bound = bound

    def __missing__(self, response_id: str) -> bytes:
        if len(self) >= self._bound:
            self.clear()
        key = self[response_id] = hash_key(response_id)
        return key


def flush_calls(batches: Mapping[str, Sequence[EventRow]],
                key_of: Callable[[str], bytes] = hash_key, compact: bool = False
                ) -> list[tuple[list[bytes], list[bytes | int]]]:
    """The flush as APPEND_EVENTS_MANY calls (the response hash keys each writes, its
    arguments after the TTL) of at most ~`MAX_EVENTS_PER_CALL` events (a stream's events are
    never split: they stay in order within one call)."""
    calls: list[tuple[list[bytes], list[bytes | int]]] = []
    part: dict[str, Sequence[EventRow]] = {}
    size = 0
    for rid, events in batches.items():
        if part and size + len(events) > MAX_EVENTS_PER_CALL:
            calls.append(stream_args(part, key_of, compact))
            part, size = {}, 0
        part[rid] = events
        size += len(events)
    if part:
        calls.append(stream_args(part, key_of, compact))
    return calls


def stream_args(batches: Mapping[str, Sequence[EventRow]],
                key_of: Callable[[str], bytes] = hash_key, compact: bool = False
                ) -> tuple[list[bytes], list[bytes | int]]:
    """Every stream's events as arguments of scripts.APPEND_EVENTS_MANY (after its TTL): per
    stream its response hash key, its number of entries, then each entry's parts (`Entry`);
    with the streams' hash keys, which a cluster's call declares."""
    hashes = [key_of(rid) for rid in batches]
    args: list[bytes | int] = []
    for key, events in zip(hashes, batches.values(), strict=True):
        found = entries(events, compact=compact)
        args += (key, len(found))
        for entry in found:
            args += entry
    return hashes, args
