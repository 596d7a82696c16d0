"""Which events of a final write the log keeps as references to the record's objects (keys.py,
"the event log's references"), compared byte for byte here, at write time: the events as the
client was sent them, the objects as the record keeps them. A reference is an event's type
(its number is its place), so neither its object's bytes travel to Redis again nor are they kept
there twice: for a short stored answer, two of its three create-time objects and one of its two
final ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from proxy.core.events.encoding import lifecycle
from proxy.store.base import EventRow
from proxy.store.lua.packing import entry_parts, packed

# The final write's events go as one log entry within these bounds (packing.py's cut beyond):
# Redis keeps a stream in nodes that close past 4 KiB (stream-node-max-bytes) and are each
# allocated at 4 KiB or more, so a short answer's final write cut into entries of 16 events
# (two, for a 16-token answer) took two nodes: ~9.4 KB of the ~12.5 KB a stored short answer
# held in Redis, and one entry holds it in one node sized to it (~5 KB). One such entry per
# log: a reader's page (pages.py) grows by at most its size.
MAX_FINAL_EVENTS = 64
MAX_FINAL_BYTES = 16 * 1024


class FinalWrite(NamedTuple):
    """The final write's log part: `inline` the events packed as they are; `head` the types of
    the first two events held as references to the create-time object (joined by byte 1, b""
    for none); `final` the terminal's type when it is held as a reference to the final object
    (b"" for none), then `obj` its bytes (a view into the terminal event's, not a copy)."""

    inline: list[EventRow]
    head: bytes
    final: bytes
    obj: memoryview | None


def refers_to(event: EventRow, obj: bytes | memoryview) -> bool:
    """`event` is exactly `{"type":<its type>,"sequence_number":<its seq>,"response":<obj>}`,
    as the assembler encodes a lifecycle event. The event it would be is made and compared
    whole: one copy of the object (a memcpy of a kilobyte or two), where comparing in place
    took a view and eight calls (~1.5 µs per event, two per stored streamed answer)."""
    seq, kind, data = event
    return data == lifecycle(kind, seq, obj)


def final_write(events: Sequence[EventRow], terminal: EventRow | None,
                first: bytes | None, length: int) -> FinalWrite:
    """The final write's events (`events` carried, then `terminal`) split into references and
    inline events. `first`: the create-time object this process wrote (None: unknown, no head
    references); `length`: the final object's length when it is the terminal's `response`
    (store/redis.py `_final_object`), else 0. The head is the first two events or nothing (an
    earlier release's reader must find its count off, keys.py); a reference needs an inline
    event beside it on its entry (an entry's last event is inline: fields t and d)."""
    inline = list(events)
    head = b""
    if (first is not None and len(inline) >= 2 and inline[0][0] == 0 and inline[1][0] == 1
            and (len(inline) > 2 or terminal is not None)
            and refers_to(inline[0], first) and refers_to(inline[1], first)):
        head = b"%s\x01%s" % (inline[0][1].encode(), inline[1][1].encode())
        del inline[:2]
    if terminal is None:
        return FinalWrite(inline, head, b"", None)
    if length and inline:
        return FinalWrite(inline, head, terminal[1].encode(),
                          memoryview(terminal[2])[-length - 1:-1])
    inline.append(terminal)
    return FinalWrite(inline, head, b"", None)


class First(NamedTuple):
    """What a streamed create wrote that its final write uses again: the create-time object
    (`obj`), and for its owner (`tenant`) the response's shard tag and the keys the final write
    declares first (the response's three, the owner's ledger), made once per response rather
    than again at its end (~2 µs of key formatting per stored answer)."""

    obj: bytes
    tenant: str
    tag: str | None
    keys: tuple[str, ...]


class FirstObjects:
    """The create-time objects of the streamed responses this process created, by id, until
    their final write. Bounded in count and in bytes (an object carries the request's
    instructions and tools, up to the body limit): forgotten whole past either bound (far more
    than one process streams at once, and what their assemblers hold already); a response
    forgotten, or ended by another instance, keeps its head inline."""

    def __init__(self, bound: int = 8192, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._by_id: dict[str, First] = {}
        self._bound = bound
        self._max_bytes = max_bytes
        self._bytes = 0

    def remember(self, response_id: str, obj: bytes, tenant: str = "", tag: str | None = None,
                 keys: tuple[str, ...] = ()) -> None:
        size = len(obj)  # (once: this runs for every stored stream's create)
        if size > self._max_bytes:
            return
        if len(self._by_id) >= self._bound or self._bytes + size > self._max_bytes:
            self._by_id.clear()
            self._bytes = 0
        old = self._by_id.pop(response_id, None)  # (`forget`, inline: a new id, nearly always)
        if old is not None:
            self._bytes -= len(old.obj)
        # `tuple.__new__` straight: the named tuple's own `__new__` is a Python call.
        self._by_id[response_id] = tuple.__new__(First, (obj, tenant, tag, keys))
        self._bytes += size

    def get(self, response_id: str) -> bytes | None:
        first = self._by_id.get(response_id)
        return (first.obj or None) if first is not None else None

    def first(self, response_id: str) -> First | None:
        """All that was remembered of the response (None: nothing)."""
        return self._by_id.get(response_id)

    def began(self, response_id: str) -> None:
        """A flush carried the response's first event: its log may have begun even if that
        flush's reply was lost (its events are then carried again, by the final write among
        others), and the final write's script writes no head on a begun log. So its head goes
        inline: the object is dropped, the keys kept."""
        first = self._by_id.get(response_id)
        if first is not None and first.obj:
            self._bytes -= len(first.obj)
            self._by_id[response_id] = first._replace(obj=b"")

    def forget(self, response_id: str) -> None:
        first = self._by_id.pop(response_id, None)
        if first is not None:
            self._bytes -= len(first.obj)


def packed_final(events: Sequence[EventRow], *, compact: bool = False) -> bytes:
    """The final write's inline events (ascending) packed as packing.py packs them, as one
    entry when they run consecutively within the bounds above."""
    if not events:
        return b""
    # By columns, as packing.py lays out a flush's entry (C loops, the types' bytes cached): a
    # format and an encode per event cost ~7 µs per stored short answer's final write.
    seqs, kinds, datas = zip(*events, strict=True)
    first, end = seqs[0], seqs[-1]
    if (len(seqs) > MAX_FINAL_EVENTS or end - first != len(seqs) - 1
            or sum(map(len, datas)) > MAX_FINAL_BYTES):
        return packed(events, compact=compact)
    return b"%d\x04%d\x04%s\x04%s\x04%s" % entry_parts(first, end, kinds, datas,
                                                        compact=compact)
