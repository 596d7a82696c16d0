"""`ShardedIds`: on a Redis Cluster, the ids of new responses and conversations, each with a
shard tag (core/shardtags.py) drawn so that this instance's new objects spread evenly over the
cluster's primaries.

How: the cluster client's slot map (redis-py's node manager: CLUSTER SLOTS at its first command,
updated on every MOVED and re-read after a failed connection) says which primary owns each
tag's slot now. This instance keeps `TAGS_PER_PRIMARY` of each primary's tags, chosen at random
(so instances differ) and kept as long as that primary owns them (so the flush of one instance
makes that many calls per primary, whatever the number of its streams), and hands out new ids
round-robin over the primaries. Regrouped from the map every `REGROUP_SECONDS`: after a
resharding, tags whose slot moved still work (the client follows MOVED/ASK), and new objects
rebalance within that period of the client learning the new map.

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

# One per primary: each call of a flush costs the proxy redis-py's cluster routing whatever it
# carries (bench/topology.py, 256 streams: client CPU per 1k tokens 6.7 ms with 2 tags per
# primary, 6.0 with 1, 4.4 on one primary). A slot holding all of one instance's objects on a
# primary is no hot spot: the primary's one core is the bound, not the slot.
TAGS_PER_PRIMARY = 1
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
        held = {tag for group in self._groups for tag in group}
        self._groups = [self._keep_or_draw(tags, held) for _, tags in sorted(by_primary.items())]
        self._turn = itertools.cycle(range(len(self._groups)))

    def _keep_or_draw(self, owned: list[str], held: set[str]) -> list[str]:
        """The tags this instance already uses that the primary still owns, topped up at
        random from its other tags."""
        kept = [tag for tag in owned if tag in held][:TAGS_PER_PRIMARY]
        others = [tag for tag in owned if tag not in kept]
        return kept + self._rng.sample(others, min(TAGS_PER_PRIMARY - len(kept), len(others)))

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
