"""Shard tags: the Redis Cluster slot of a response or a conversation, chosen when its id is
made and read back from the id alone (store/keys.py, store/connection/shards.py).

A tagged id is `<prefix>_<tag>_<hex>` (`resp_q3_6f1c…`); every key of that object, and the
keys its scripts write beside it (its item index entries, its lease, its tenant's storage
ledger for it), carry `{<tag>}` as their hash tag, so one script call per tag serves any number
of objects: the event-log flush makes one call per tag it holds live streams in, not one per
stream. Ids without a tag (every id made before Cluster support, and every id on one primary or
Sentinel, where there are no slots to choose) keep today's keys.

The tags are a fixed set, the same on every instance without any I/O: tag `b` is the first
base-36 string whose slot (CRC16 mod 16384, as Redis hashes a key) falls in the b-th of
`BUCKETS` equal ranges of slots. Whoever owns a range owns its tag, so tags exist for every
primary that owns a whole range (store/connection/shards.py draws, for each primary, among the tags
it owns now), and readers that must look at every tag (the lease sweep, the storage ledger's sum,
an item index lookup) look at `BUCKETS` keys, not 16384.
"""

from __future__ import annotations

import binascii
import itertools
from typing import Final

from proxy.core.ids import random_hex

SLOTS: Final = 16384
# Enough for the tags to spread over a few dozen primaries (a range is 512 slots); few enough
# that reading every tag (the sweep, the ledger's sum) is one pipeline of 32 small commands.
BUCKETS: Final = 32
_ALPHABET: Final = "0123456789abcdefghijklmnopqrstuvwxyz"
# Hex digits after a tagged id's tag: with the tag and its separator, about as long as an
# untagged id's 48.
_TAGGED_HEX: Final = 22  # bytes: 44 hex digits


def key_slot(text: str) -> int:
    """The slot of a hash tag (Redis: CRC16-XMODEM of the tag, mod 16384)."""
    return binascii.crc_hqx(text.encode(), 0) % SLOTS


def _base36(n: int) -> str:
    digits = ""
    while True:
        n, rest = divmod(n, 36)
        digits = _ALPHABET[rest] + digits
        if n == 0:
            return digits


def _all_tags() -> tuple[str, ...]:
    found: dict[int, str] = {}
    for n in itertools.count():  # ends: short strings cover every range within ~200 tries
        tag = _base36(n)
        found.setdefault(key_slot(tag) * BUCKETS // SLOTS, tag)
        if len(found) == BUCKETS:
            return tuple(found[b] for b in range(BUCKETS))
    raise AssertionError("unreachable")


TAGS: Final = _all_tags()
_TAG_SET: Final = frozenset(TAGS)


def tag_of(object_id: str) -> str | None:
    """The shard tag an id carries, or None (an untagged id). Only the fixed tags count: a
    client-made id with something else between underscores is simply untagged."""
    first = object_id.find("_")
    if first < 0:
        return None
    second = object_id.find("_", first + 1)
    if second < 0:
        return None
    tag = object_id[first + 1:second]
    return tag if tag in _TAG_SET else None


def tagged_id(prefix: str, tag: str) -> str:
    return f"{prefix}_{tag}_{random_hex(_TAGGED_HEX)}"
