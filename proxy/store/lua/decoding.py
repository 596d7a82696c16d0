"""How the store's replies become objects (store/redis.py): records, events, items, the results
of the status scripts. Objects cross as orjson bytes and are decoded only here and in redis.py;
Lua never parses JSON."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from proxy.core.types import Item, ResponseObject
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent, Transition


def held_items(holders: Sequence[str], replies: Iterator[Any], tenant: str) -> list[Item]:
    """The items of those holders (`find_items`' second read) that belong to `tenant`."""
    items: list[Item] = []
    for holder in holders:
        if holder.startswith(keys.ITEM_IN_OUTPUT + ":"):
            owner, obj = next(replies)
            held = (orjson.loads(obj).get("output") or []) if obj else []
        else:
            (owner,), raw = next(replies), next(replies)
            held = items_of(raw)
        if owner is not None and owner.decode() == tenant:
            items += held
    return items


def item_ids(items: Sequence[Item]) -> list[str]:
    """The ids the item index (keys.py) gets entries for: those of the items with one."""
    return [str(item["id"]) for item in items if isinstance(item, dict) and item.get("id")]


# The objects an entry's references splice in (keys.py, "the event log's references"): the
# record's create-time object (`first`) and its final one (`obj`); None where not read.
Objects = tuple[bytes | None, bytes | None]
NO_OBJECTS: Objects = (None, None)


def referring(fields: dict[bytes, bytes]) -> bool:
    """The entry holds events by reference: its reader needs the record's objects."""
    return keys.E_HEAD in fields or keys.E_FINAL in fields


def spliced(kind: str, seq: int, obj: bytes) -> bytes:
    """A referenced event's JSON: the bytes the writer compared it with (store/redis.py)."""
    return b'{"type":"%s","sequence_number":%d,"response":%s}' % (kind.encode(), seq, obj)


def events_of(entry_id: bytes, fields: dict[bytes, bytes], after: int = -1,
              objects: Objects = NO_OBJECTS) -> list[StoredEvent]:
    """The events of one log entry (keys.py, "the event log") with seq > `after`. An entry's id
    is `1-<its last inline seq>`, fields t and d its last inline event and, when it holds more, c
    the events before it (packing.py; e in releases before c405424, records all in full); an earlier
    release's entry is the one-event case, so a log written across a rolling upgrade replays
    whole. h and f: events before and after those, held as references to `objects` (an object
    not read ends the entry there: a gap, never a broken event)."""
    last = int(entry_id[2:])  # b"1-<seq>"
    end = StoredEvent(last, _type_of(fields[b"t"]), fields[b"d"])
    earlier = fields.get(keys.E_EARLIER)
    if earlier is None:
        earlier = fields.get(keys.E_EARLIER_FULL)
    if earlier is None or last - 1 <= after:
        events = [end] if last > after else []
    else:
        events = _earlier(earlier, last, after)
        events.append(end)
    if len(fields) > 2 + (earlier is not None):  # h or f (keys.py): a log's first or last entry
        inline = earlier.count(b"\x01") + 2 if earlier is not None else 1
        return _with_references(events, fields, last, last - inline + 1, after, objects)
    return events


def _earlier(earlier: bytes, last: int, after: int) -> list[StoredEvent]:
    """An entry's earlier records (packing.py `records`; a record in full is `<type> 0x00
    <JSON>`, a compact one byte 5 and its JSON past the template's start) as events."""
    body, compact, template = earlier.rpartition(b"\x07")
    if not compact:  # no compact record (or field e): no template
        body, template = template, b""
    parts = body.split(b"\x01")
    seq = last - len(parts)
    skip = after - seq + 1  # events of the entry at or before `after` (a start mid-entry)
    if skip > 0:
        parts, seq = parts[skip:], seq + skip
    run_type, _, item = template.partition(b"\x00")
    run_kind = _type_of(run_type) if template else ""
    events: list[StoredEvent] = []
    for part in parts:
        if part[:1] == b"\x05":
            events.append(StoredEvent(seq, run_kind, b'{"type":"%s","sequence_number":%d%s%s'
                                      % (run_type, seq, item, part[1:])))
        else:
            kind, _, data = part.partition(b"\x00")
            events.append(StoredEvent(seq, _type_of(kind), data))
        seq += 1
    return events


def _with_references(events: list[StoredEvent], fields: dict[bytes, bytes], last: int,
                     first_seq: int, after: int, objects: Objects) -> list[StoredEvent]:
    """`events` (the entry's inline ones from `first_seq`, those after `after`) with the head's
    references before them and the terminal's after them."""
    first, final = objects
    head = fields.get(keys.E_HEAD)
    if head is not None:
        kinds = head.split(b"\x01")
        seq = first_seq - len(kinds)
        if first is None:
            if seq > after:
                return []  # the entry's start is not readable: nothing from it (a gap)
        else:
            events[:0] = [StoredEvent(n, kind, spliced(kind, n, first))
                          for n, kind in enumerate(map(_type_of, kinds), seq) if n > after]
    kind_bytes = fields.get(keys.E_FINAL)
    if kind_bytes is not None and final is not None:
        seq, kind = last + 1, _type_of(kind_bytes)
        if seq > after:
            events.append(StoredEvent(seq, kind, spliced(kind, seq, final)))
    return events


def entries_events(entries: Any, after: int = -1,
                   objects: Objects = NO_OBJECTS) -> list[StoredEvent]:
    """The events of a stream read's entries (XRANGE, XREAD) with seq > `after`, in order."""
    events: list[StoredEvent] = []
    for entry_id, fields in entries or ():
        events += events_of(entry_id, fields, after, objects)
    return events


# Event types as str: a dozen distinct byte strings, decoded once instead of once per event.
_TYPES: dict[bytes, str] = {}


def _type_of(kind: bytes) -> str:
    decoded = _TYPES.get(kind)
    if decoded is None:
        if len(_TYPES) >= 256:  # bounded whatever a log holds
            _TYPES.clear()
        decoded = _TYPES[kind] = kind.decode()
    return decoded


def items_of(raw: bytes | None) -> list[Item]:
    return orjson.loads(raw) if raw else []


def record_of(values: Sequence[Any]) -> ResponseRecord | None:
    status, tenant, obj, parents, logged, closed = values
    if status is None or tenant is None or obj is None:
        return None
    response: ResponseObject = orjson.loads(obj)
    response["status"] = status.decode()
    return ResponseRecord(
        response=response, tenant=tenant.decode(),
        parents=tuple(orjson.loads(parents)) if parents else (),
        logged=logged == b"1", closed=closed == b"1",
    )


def finished_of(reply: Any, written: ResponseObject) -> Transition:
    """FINISH_RESPONSE's reply: when it wrote, the object is `written` (not sent back, nor
    parsed again: ~8 µs per final write); when it refused, the stored one."""
    if reply is not None and reply[0] == 1:
        return Transition(changed=True, response=written)
    return transition_of(reply)


def transition_of(reply: Any) -> Transition:
    if reply is None:
        return Transition(changed=False, response=None)
    changed, status, obj = reply
    response: ResponseObject = orjson.loads(obj)
    response["status"] = status.decode()
    return Transition(changed=changed == 1, response=response)
