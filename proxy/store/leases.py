"""`LeaseTable`: which instance still writes each foreground stored response (keys.LEASES).

A thin adapter over sorted sets and three scripts (scripts.py): one round trip per call,
every failure of the server a `StoreUnavailable`. One set per shard tag (keys.leases): a
response's lease sits in its slot, taken by the script that creates it. On one primary every id
is untagged, so there is one set and nothing changes; on a cluster a renewal makes one call per
tag its responses carry (concurrently) and the sweep reads every tag's set. What the leases
mean, and who renews and reaps them, is services/eventlog/ownership.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from enum import Enum

from redis.asyncio import Redis

from proxy.core.shardtags import TAGS, tag_of
from proxy.store import keys
from proxy.store.lua import scripts
from proxy.store.redis import read_retrying, store_errors


class LeaseState(Enum):
    HELD = 0
    EXPIRED = 1
    ABSENT = -1  # never leased (not a foreground stored response, or from an older version)


class LeaseTable:
    def __init__(self, client: Redis, *, sharded: bool = False) -> None:
        self._client = client
        # The sets the sweep reads: the untagged one, and on a cluster every tag's.
        self._sets = [keys.LEASES, *(keys.leases(tag) for tag in TAGS)] if sharded \
            else [keys.LEASES]
        self._renew = client.register_script(scripts.RENEW_LEASES)
        self._expired = client.register_script(scripts.EXPIRED_LEASES)
        self._state = client.register_script(scripts.LEASE_STATE)

    async def renew(self, *, ttl_ms: int, new: Sequence[str] = (), held: Sequence[str] = (),
                    dropped: Sequence[str] = ()) -> list[str]:
        """Take `new` leases, renew `held` ones, drop `dropped` ones (those whose response is
        terminal or gone; the others are left to expire: scripts.RENEW_LEASES says why); the
        held ids whose lease had already expired (not renewed: no longer ours) are
        returned."""
        if not (new or held or dropped):
            return []
        groups: dict[str | None, tuple[list[str], list[str], list[str]]] = {}
        for n, ids in enumerate((new, held, dropped)):
            for rid in ids:
                groups.setdefault(tag_of(rid), ([], [], []))[n].append(rid)
        with store_errors():
            replies = await asyncio.gather(*(self._renew_set(tag, ttl_ms, *lists)
                                             for tag, lists in groups.items()))
        return [raw.decode() for lost in replies for raw in lost]

    async def _renew_set(self, tag: str | None, ttl_ms: int, new: list[str], held: list[str],
                         dropped: list[str]) -> list[bytes]:
        args: list[str | int] = [ttl_ms, len(new), *new, len(held), *held, *dropped]
        lost: list[bytes] = await self._renew(
            keys=[keys.leases(tag), *(keys.response(rid) for rid in dropped)], args=args)
        return lost

    async def expired(self, limit: int) -> list[str]:
        """Up to `limit` expired leases (on a cluster: of every tag's set, read side by side;
        the sweep closes those it gets, so the next sweep reaches the rest)."""
        with store_errors():
            found = await asyncio.gather(*(self._expired_in(key, limit) for key in self._sets))
        return [raw.decode() for ids in found for raw in ids][:limit]

    async def _expired_in(self, key: str, limit: int) -> list[bytes]:
        found: list[bytes] = await read_retrying(lambda: self._expired(keys=[key], args=[limit]))
        return found

    async def state(self, response_id: str) -> LeaseState:
        key = keys.leases(tag_of(response_id))
        with store_errors():
            reply = await read_retrying(
                lambda: self._state(keys=[key], args=[response_id]))
        return LeaseState(int(reply))

    async def claim(self, response_id: str, owner: str, ttl_ms: int) -> bool:
        """Become the one that closes `response_id` (its lease expired), for `ttl_ms`."""
        with store_errors():
            return bool(await self._client.set(keys.response_reaper(response_id), owner,
                                               nx=True, px=ttl_ms))
