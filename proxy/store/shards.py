"""`ShardedIds`: on a Redis Cluster, the ids of new responses and conversations, each with a
shard tag (core/shardtags.py) drawn so that this instance's new objects spread evenly over the
cluster's primaries.

How: the cluster client's slot map (redis-py's node manager: CLUSTER SLOTS at its first command,
updated on every MOVED and re-read after a failed connection) says which primary owns each
tag's slot now. This instance keeps `TAGS_PER_PRIMARY` of each primary's tags, chosen at random
at each regrouping (so instances differ, and the flush of one instance makes at most that many
calls per primary, whatever the number of its streams), and hands out new ids round-robin over
the primaries. Regrouped from the map every `REGROUP_SECONDS`: after a resharding, tags whose
slot moved still work (the client follows MOVED/ASK), and new objects rebalance within that
period of the client learning the new map.

Everything else keeps `new_id` (item ids, call ids...): only responses and conversations own
keys whose scripts span slots. Dict look-ups per new id, no I/O.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from proxy.core import ids as idp
from proxy.core.shardtags import TAGS, key_slot, tagged_id

# Two per primary: enough that one instance's objects do not all share one slot (a migration
# moves a slot at a time), few enough that a flush stays a couple of calls per primary.
TAGS_PER_PRIMARY = 2
REGROUP_SECONDS = 10.0
_TAGGED = frozenset({idp.RESPONSE, idp.CONVERSATION})


class ShardedIds:
    """An `IdFactory` (core/ids.py). `owners`: tag -> the name of the primary owning its slot
    now, or {} while the map is unknown (before the first command: tags drawn from all)."""

    def __init__(self, owners: Callable[[], dict[str, str]], *,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self._owners = owners
        self._clock = clock
        self._rng = rng or random.Random()
        self._next_regroup = 0.0
        self._groups: list[list[str]] = []
        self._turn: itertools.cycle[int] = itertools.cycle([0])

    def __call__(self, prefix: str) -> str:
        if prefix not in _TAGGED:
            return idp.new_id(prefix)
        now = self._clock()
        if now >= self._next_regroup:
            self._regroup()
            self._next_regroup = now + REGROUP_SECONDS
        group = self._groups[next(self._turn) % len(self._groups)]
        return tagged_id(prefix, self._rng.choice(group))

    def _regroup(self) -> None:
        by_primary: dict[str, list[str]] = {}
        for tag, owner in self._owners().items():
            by_primary.setdefault(owner, []).append(tag)
        if not by_primary:
            by_primary = {"": list(TAGS)}
        self._groups = [self._rng.sample(tags, min(TAGS_PER_PRIMARY, len(tags)))
                        for _, tags in sorted(by_primary.items())]
        self._turn = itertools.cycle(range(len(self._groups)))

    def groups(self) -> list[list[str]]:
        """The tags in use, one list per primary (for tests and /metrics)."""
        return [list(group) for group in self._groups]


def cluster_owners(client: Any) -> Callable[[], dict[str, str]]:
    """Reads a redis-py cluster client's slot map: tag -> its slot's primary ("host:port")."""
    def owners() -> dict[str, str]:
        cache = client.nodes_manager.slots_cache
        found: dict[str, str] = {}
        for tag in TAGS:
            nodes = cache.get(key_slot(tag))
            if nodes:
                found[tag] = nodes[0].name
        return found

    return owners
