"""How events travel to the append scripts (scripts.py): packed into one argument per call, the
flush cut into calls of bounded size and, on a Redis Cluster, one call per shard tag."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from proxy.core.shardtags import tag_of
from proxy.store import keys
from proxy.store.base import StoredEvent

V = TypeVar("V")


def packed(events: Sequence[StoredEvent]) -> bytes:
    """Events as one script argument (scripts.py, `append_packed`)."""
    return b"\x01".join([b"%d\x00%s\x00%s" % (e.seq, e.type.encode(), e.data)
                          for e in events])


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


def packed_calls(batches: Mapping[str, Sequence[StoredEvent]]) -> list[tuple[str, bytes]]:
    """The flush as APPEND_EVENTS_MANY calls (a key to route it by, its blob) of at most
    ~`MAX_EVENTS_PER_CALL` events (a stream's events are never split: they stay in order
    within one call)."""
    calls: list[tuple[str, bytes]] = []
    part: dict[str, Sequence[StoredEvent]] = {}
    size = 0
    for rid, events in batches.items():
        if part and size + len(events) > MAX_EVENTS_PER_CALL:
            calls.append(packed_streams(part))
            part, size = {}, 0
        part[rid] = events
        size += len(events)
    if part:
        calls.append(packed_streams(part))
    return calls


def packed_streams(batches: Mapping[str, Sequence[StoredEvent]]) -> tuple[str, bytes]:
    """Every stream's events as the one argument of scripts.APPEND_EVENTS_MANY: per stream
    `<response hash key> 0x03 <packed events>`, streams separated by 0x02 (keys are ASCII,
    JSON escapes both); with the first stream's key, which the call declares."""
    hashes = [keys.response(rid) for rid in batches]
    blob = b"\x02".join([b"%s\x03%s" % (key.encode(), packed(events))
                          for key, events in zip(hashes, batches.values(), strict=True)])
    return hashes[0], blob
