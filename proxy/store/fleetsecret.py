"""The deployment's random fleet secret (keys.FLEET_SECRET): one round trip, every failure of
the server a `StoreUnavailable`. Who uses it and why is services/process/sealing.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from proxy.store import keys
from proxy.store.redis import store_errors

# `shared_secret` bound to a client: what a service is handed (store/connection/factory.py
# `Backend`).
SecretRead = Callable[[bytes], Awaitable[bytes]]


async def shared_secret(client: Redis, candidate: bytes) -> bytes:
    """The secret already kept, else `candidate`, now kept: `SET NX GET` (Redis 7.0) answers
    both in one atomic command, so two instances starting together agree on one secret."""
    with store_errors():
        held = await client.set(keys.FLEET_SECRET, candidate, nx=True, get=True)
    return held if isinstance(held, bytes) and held else candidate
