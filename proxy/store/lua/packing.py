"""How events travel to the append scripts (scripts.py): packed into one argument per call, the
flush cut into calls of bounded size and, on a Redis Cluster, one call per shard tag."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


def packed_calls(batches: Mapping[str, Sequence[StoredEvent]],
                 key_of: Callable[[str], bytes] = hash_key) -> list[tuple[list[bytes], bytes]]:
    """The flush as APPEND_EVENTS_MANY calls (the response hash keys it writes, its blob) of
    at most ~`MAX_EVENTS_PER_CALL` events (a stream's events are never split: they stay in
    order within one call)."""
    calls: list[tuple[list[bytes], bytes]] = []
    part: dict[str, Sequence[StoredEvent]] = {}
    size = 0
    for rid, events in batches.items():
        if part and size + len(events) > MAX_EVENTS_PER_CALL:
            calls.append(packed_streams(part, key_of))
            part, size = {}, 0
        part[rid] = events
        size += len(events)
    if part:
        calls.append(packed_streams(part, key_of))
    return calls


def packed_streams(batches: Mapping[str, Sequence[StoredEvent]],
                   key_of: Callable[[str], bytes] = hash_key) -> tuple[list[bytes], bytes]:
    """Every stream's events as the one argument of scripts.APPEND_EVENTS_MANY: per stream
    `<response hash key> 0x03 <packed events>`, streams separated by 0x02 (keys are ASCII,
    JSON escapes both); with the streams' hash keys, which a cluster's call declares."""
    hashes = [key_of(rid) for rid in batches]
    blob = b"\x02".join([b"%s\x03%s" % (key, packed(events))
                          for key, events in zip(hashes, batches.values(), strict=True)])
    return hashes, blob
