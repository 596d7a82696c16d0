"""`LeaseTable`: which instance still writes each foreground stored response (keys.LEASES).

A thin adapter over one sorted set and three scripts (scripts.py): one round trip per call,
every failure of the server a `StoreUnavailable`. What the leases mean, and who renews and
reaps them, is services/eventlog/ownership.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from redis.asyncio import Redis

from proxy.store import keys, scripts
from proxy.store.redis import read_retrying, store_errors


class LeaseState(Enum):
    HELD = 0
    EXPIRED = 1
    ABSENT = -1  # never leased (not a foreground stored response, or from an older version)


class LeaseTable:
    def __init__(self, client: Redis) -> None:
        self._client = client
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
        args: list[str | int] = [ttl_ms, len(new), *new, len(held), *held, *dropped]
        with store_errors():
            lost = await self._renew(
                keys=[keys.LEASES, *(keys.response(rid) for rid in dropped)], args=args)
        return [raw.decode() for raw in lost]

    async def expired(self, limit: int) -> list[str]:
        with store_errors():
            found = await read_retrying(
                lambda: self._expired(keys=[keys.LEASES], args=[limit]))
        return [raw.decode() for raw in found]

    async def state(self, response_id: str) -> LeaseState:
        with store_errors():
            reply = await read_retrying(
                lambda: self._state(keys=[keys.LEASES], args=[response_id]))
        return LeaseState(int(reply))

    async def claim(self, response_id: str, owner: str, ttl_ms: int) -> bool:
        """Become the one that closes `response_id` (its lease expired), for `ttl_ms`."""
        with store_errors():
            return bool(await self._client.set(keys.response_reaper(response_id), owner,
                                               nx=True, px=ttl_ms))
