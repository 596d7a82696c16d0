"""Uploaded files (`/v1/files`): the `BlobStore` interface and its Redis implementation.

`BlobStore` is what the Files API and anything reading files (input_file parts, vector-store
ingestion) use: put a file's object with its bytes, get the object, read the bytes back in
chunks, delete, list. An object store (S3 and the like) can replace Redis behind it.

Redis layout (keys.py): the bytes in a HASH of chunks of at most `CHUNK_BYTES` (no value of
tens of MiB: one huge string blocks Redis while it is copied and replicated), written as they
arrive, one round trip each; then the record (the object, the chunk count) and the list entry
in one script, which also counts the file's bytes in the key's storage ledger (ledger.py). A
reader finds a file only once its record exists, so a half-written upload is never seen; one
that failed halfway leaves chunks that expire with their TTL. Every key of a tenant's files
shares the tag `{<tenant>}` (one slot per script); another key's file id is an unknown id.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Final, Protocol

import orjson
from redis.asyncio import Redis

from proxy.core.request.paging import PageRequest
from proxy.store import keys
from proxy.store.budget.ledger import LEDGER
from proxy.store.connection.failures import read_retrying, store_errors
from proxy.store.objects.listing import index_page

# Big enough that a 32 MiB file is 64 round trips, small enough that no single value stalls
# Redis (or a replica's stream) noticeably.
CHUNK_BYTES: Final = 512 * 1024

# KEYS: record, chunks, list, ledger. ARGV: object JSON, chunk count, bytes, ttl, created_at, id.
_PUT: Final = LEDGER + """
local now = ledger_now()
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'obj', ARGV[1], 'n', ARGV[2])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[6])
if redis.call('TTL', KEYS[3]) < ttl then redis.call('EXPIRE', KEYS[3], ttl) end
ledger_set(KEYS[4], KEYS[1], now, tonumber(ARGV[3]), ledger_until(now, ttl))
return 1
"""

# KEYS: record, chunks, list, ledger. ARGV: id. 1: deleted; 0: no such file.
_DELETE: Final = LEDGER + """
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
ledger_set(KEYS[4], KEYS[1], ledger_now(), 0, 0)
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""


class BlobStore(Protocol):
    async def put(self, tenant: str, file: dict[str, Any], chunks: AsyncIterable[bytes], *,
                  ttl: int) -> None:
        """Store `file` (its object, `id` and `created_at` in it) with its bytes, `chunks` of
        at most CHUNK_BYTES each, for `ttl` seconds. Seen by readers only once complete."""

    async def get(self, tenant: str, file_id: str) -> dict[str, Any] | None:
        """The file's object; None when unknown to this tenant (or expired)."""

    def read(self, tenant: str, file_id: str) -> AsyncIterator[bytes]:
        """The file's bytes, chunk by chunk (nothing for an unknown file: `get` it first)."""

    async def delete(self, tenant: str, file_id: str) -> bool:
        """Whether the tenant had the file (it has not now)."""

    async def list(self, tenant: str, page: PageRequest, purpose: str | None = None
                   ) -> tuple[list[dict[str, Any]], bool]:
        """One page of the tenant's files, and whether more follow."""


class RedisBlobStore:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._put = client.register_script(_PUT)
        self._delete = client.register_script(_DELETE)

    async def put(self, tenant: str, file: dict[str, Any], chunks: AsyncIterable[bytes], *,
                  ttl: int) -> None:
        file_id = str(file["id"])
        where = keys.file_chunks(tenant, file_id)
        count = 0
        try:
            async for chunk in chunks:
                with store_errors():
                    async with self._client.pipeline(transaction=True) as pipe:
                        pipe.hset(where, str(count), chunk)
                        pipe.expire(where, ttl)
                        await pipe.execute()
                count += 1
            with store_errors():
                await self._put(
                    keys=[keys.file_record(tenant, file_id), where, keys.file_index(tenant),
                          keys.stored_bytes(tenant)],
                    args=[orjson.dumps(file), count, int(file["bytes"]), ttl,
                          int(file["created_at"]), file_id])
        except BaseException:
            # An upload cut short: its chunks would expire anyway; free them now if we can.
            if count:
                with contextlib.suppress(Exception):
                    await self._client.delete(where)
            raise

    async def get(self, tenant: str, file_id: str) -> dict[str, Any] | None:
        raw = await read_retrying(
            lambda: self._client.hget(keys.file_record(tenant, file_id), "obj"))
        return None if raw is None else dict(orjson.loads(raw))

    async def read(self, tenant: str, file_id: str) -> AsyncIterator[bytes]:
        count = await read_retrying(
            lambda: self._client.hget(keys.file_record(tenant, file_id), "n"))
        where = keys.file_chunks(tenant, file_id)
        for index in range(int(count or 0)):
            chunk: Any = await read_retrying(
                functools.partial(self._client.hget, where, str(index)))
            if chunk is None:  # deleted (or expired) while being read
                return
            yield bytes(chunk)

    async def delete(self, tenant: str, file_id: str) -> bool:
        with store_errors():
            done = await self._delete(
                keys=[keys.file_record(tenant, file_id), keys.file_chunks(tenant, file_id),
                      keys.file_index(tenant), keys.stored_bytes(tenant)],
                args=[file_id])
        return bool(done)

    async def list(self, tenant: str, page: PageRequest, purpose: str | None = None
                   ) -> tuple[list[dict[str, Any]], bool]:
        def read(pipe: Any, file_id: str) -> None:
            pipe.hget(keys.file_record(tenant, file_id), "obj")

        return await index_page(self._client, keys.file_index(tenant), read, page,
                                lambda obj: purpose is None or obj.get("purpose") == purpose)
