"""The managed client keys (core/policy/apikeys.py) in the shared store, and the counter that tells
every instance they changed.

    apikeys:{keys}          HASH    key id -> the key's record (JSON; a digest, never a secret)
    apikeys:{keys}:version  STRING  bumped by every write; instances poll it (one GET)

One hash tag, so a write and its bump are one script on a cluster too. The poll is one GET;
the records are read only when it moved. Not expiring: these are the operator's
configuration, bounded by the keys the operator creates (revoking deletes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from proxy.core.errors import StoreUnavailable
from proxy.core.policy.apikeys import ManagedKey

KEYS = b"apikeys:{keys}"
VERSION = b"apikeys:{keys}:version"

T = TypeVar("T")

# A write and the version bump, atomically. ARGV[3]: "1" = only if the key exists (an update:
# a revoke racing it is not undone by it).
_PUT = """
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
"""
_DELETE = """
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
if removed == 1 then redis.call('INCR', KEYS[2]) end
return removed
"""


class ManagedKeyStore:
    def __init__(self, client: Redis) -> None:
        self._client = client

    async def version(self) -> int:
        raw = await self._call(lambda: self._client.get(VERSION))
        return int(raw) if raw else 0

    async def all(self) -> tuple[int, list[ManagedKey]]:
        """The version, then every record: a write landing between the two leaves the records
        newer than the version, so the next poll reads them again (never the reverse)."""
        version = await self.version()
        raw = await self._call(lambda: self._client.hgetall(KEYS))
        keys = [ManagedKey.from_json(orjson.loads(value)) for value in raw.values()]
        return version, sorted(keys, key=lambda k: (k.created_at, k.id))

    async def get(self, key_id: str) -> ManagedKey | None:
        raw = await self._call(lambda: self._client.hget(KEYS, key_id))
        return ManagedKey.from_json(orjson.loads(raw)) if raw else None

    async def put(self, key: ManagedKey) -> None:
        await self._eval(_PUT, key.id, orjson.dumps(key.to_json()), b"0")

    async def update(self, key: ManagedKey) -> bool:
        """False: no such key (revoked meanwhile)."""
        return bool(await self._eval(_PUT, key.id, orjson.dumps(key.to_json()), b"1"))

    async def delete(self, key_id: str) -> bool:
        return bool(await self._eval(_DELETE, key_id))

    async def _eval(self, script: str, *args: str | bytes) -> Any:
        return await self._call(lambda: self._client.eval(
            script, 2, KEYS, VERSION, *args))

    @staticmethod
    async def _call(op: Callable[[], Awaitable[T]]) -> T:
        try:
            return await op()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"The key store is unavailable: {type(exc).__name__}."
                                   ) from exc
