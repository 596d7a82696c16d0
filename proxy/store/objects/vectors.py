"""Vector stores in Redis (`/v1/vector_stores`): records, files, batches, chunks.

Layout (keys.py "vector stores"): a store's record HASH (`obj`, `ver`, `chunks`), its files'
objects in one HASH, its batches in another, each ingested file's chunks in a HASH of their own
(`v`: the vectors as one float32 blob, `t`: the texts as a JSON list, `m`: the file's name and
attributes, `n`: how many). All under the tenant's tag, so each script below touches one slot.

Invariants:
- A file's chunks are written together with its `completed` status, and only while the store
  and the file's entry still exist (a file deleted, or a store deleted, while it was being
  ingested leaves nothing behind).
- `ver` grows whenever what a search sees changes (a file completed or deleted): a process
  that keeps a store's vectors in memory (services/vectors/search.py) reloads them when it
  differs, one HGET per search otherwise.
- `chunks` counts the store's chunks; a file that would take it past `max_chunks` fails
  instead, and a store never holds more than `max_files` files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson
from redis.asyncio import Redis

from proxy.core.request.paging import PageRequest
from proxy.store import keys
from proxy.store.budget.ledger import LEDGER
from proxy.store.connection.failures import read_retrying, store_errors
from proxy.store.objects.listing import index_page

# KEYS: record, index. ARGV: obj, ttl, created_at, id.
_CREATE: Final = """
redis.call('HSET', KEYS[1], 'obj', ARGV[1], 'ver', 0, 'chunks', 0)
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
if redis.call('TTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
return 1
"""

# KEYS: record, files, batches. ARGV: ttl, max files, batch id or "", batch JSON, then
# (file id, file object) pairs. 1: added; 0: no such store; -1: too many files.
_ADD_FILES: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local new = 0
for i = 5, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then new = new + 1 end
end
if redis.call('HLEN', KEYS[2]) + new > tonumber(ARGV[2]) then return -1 end
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
  redis.call('EXPIRE', KEYS[3], ARGV[1])
end
return 1
"""

# A file's chunks (vectors, texts, meta) count in the key's storage ledger (ledger.py) like a
# stored response: the chunks' hash is the ledger's record, so replacing, deleting or expiring
# them moves exactly what they counted. The ledger `lim:{<tenant>}:stored` shares the store's
# hash tag: one slot per script on a cluster too.

# KEYS: record, files, chunks, ledger. ARGV: file id, file object, n, ttl, max chunks, vectors,
# texts, meta, dim, the file's object as the ingestion began. 1: stored; 0: the store or the
# file is gone, or the file was added again since (that newer ingestion finishes it); -1: the
# store would hold too many.
_FINISH_FILE: Final = LEDGER + """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[10] then
  return 0
end
local n = tonumber(ARGV[3])
local old = tonumber(redis.call('HGET', KEYS[3], 'n') or '0')
local total = tonumber(redis.call('HGET', KEYS[1], 'chunks') or '0') - old + n
if n > 0 and total > tonumber(ARGV[5]) then return -1 end
redis.call('HSET', KEYS[1], 'chunks', total)
local now = ledger_now()
if n > 0 then
  redis.call('HSET', KEYS[3], 'v', ARGV[6], 't', ARGV[7], 'm', ARGV[8], 'n', n, 'd', ARGV[9])
  redis.call('EXPIRE', KEYS[3], ARGV[4])
  ledger_set(KEYS[4], KEYS[3], now, #ARGV[6] + #ARGV[7] + #ARGV[8], ledger_until(now, ARGV[4]))
else
  ledger_set(KEYS[4], KEYS[3], now, 0, 0)
  redis.call('DEL', KEYS[3])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
return 1
"""

# KEYS: record, files, chunks, ledger. ARGV: file id. 1: removed; 0: not in the store.
_DELETE_FILE: Final = LEDGER + """
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
local old = tonumber(redis.call('HGET', KEYS[3], 'n') or '0')
ledger_set(KEYS[4], KEYS[3], ledger_now(), 0, 0)
redis.call('DEL', KEYS[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'chunks', -old)
  redis.call('HINCRBY', KEYS[1], 'ver', 1)
end
return 1
"""

# KEYS: record, files, batches, index, ledger, then every file's chunks. ARGV: id.
_DELETE_STORE: Final = LEDGER + """
redis.call('ZREM', KEYS[4], ARGV[1])
local existed = redis.call('DEL', KEYS[1])
local now = ledger_now()
for i = 6, #KEYS do ledger_set(KEYS[5], KEYS[i], now, 0, 0) end
for i = 2, #KEYS do if i ~= 4 and i ~= 5 then redis.call('DEL', KEYS[i]) end end
return existed
"""


@dataclass(frozen=True, slots=True)
class StoredChunks:
    """One completed file's chunks as stored."""

    meta: dict[str, Any]  # file_id, filename, attributes
    vectors: bytes  # float32, n x dim
    dim: int
    texts: list[str]


class RedisVectorStores:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._create, self._add, self._finish, self._delete_file, self._delete = (
            client.register_script(source)
            for source in (_CREATE, _ADD_FILES, _FINISH_FILE, _DELETE_FILE, _DELETE_STORE))

    # -- stores --------------------------------------------------------------------------------
    async def create(self, tenant: str, record: dict[str, Any], ttl: int) -> None:
        with store_errors():
            await self._create(keys=[keys.vector_store(tenant, record["id"]),
                                     keys.vector_store_index(tenant)],
                               args=[orjson.dumps(record), ttl, record["created_at"],
                                     record["id"]])

    async def get(self, tenant: str, vs_id: str
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """(the record, its files' objects), or None: no such store for this key."""
        async def read() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hget(keys.vector_store(tenant, vs_id), "obj")
                pipe.hvals(keys.vector_store_files(tenant, vs_id))
                return await pipe.execute()

        raw, files = await read_retrying(read)
        if raw is None:
            return None
        return orjson.loads(raw), [orjson.loads(f) for f in files]

    async def renew(self, tenant: str, record: dict[str, Any], ttl: int) -> bool:
        """Write the record (a new name, last_active_at...) and give every key of the store
        `ttl` seconds more; False when the store is gone."""
        vs_id = record["id"]
        files: Any = await read_retrying(
            lambda: self._client.hkeys(keys.vector_store_files(tenant, vs_id)))
        with store_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.exists(keys.vector_store(tenant, vs_id))
                pipe.hset(keys.vector_store(tenant, vs_id), "obj", orjson.dumps(record))
                for key in (keys.vector_store(tenant, vs_id),
                            keys.vector_store_files(tenant, vs_id),
                            keys.vector_store_batches(tenant, vs_id),
                            *(keys.vector_store_chunks(tenant, vs_id, bytes(f).decode())
                              for f in files)):
                    pipe.expire(key, ttl)
                existed, *_ = await pipe.execute()
        if not existed:  # deleted meanwhile: drop what the HSET just recreated
            with store_errors():
                await self._client.delete(keys.vector_store(tenant, vs_id))
        return bool(existed)

    async def delete(self, tenant: str, vs_id: str) -> bool:
        files: Any = await read_retrying(
            lambda: self._client.hkeys(keys.vector_store_files(tenant, vs_id)))
        with store_errors():
            done = await self._delete(
                keys=[keys.vector_store(tenant, vs_id), keys.vector_store_files(tenant, vs_id),
                      keys.vector_store_batches(tenant, vs_id), keys.vector_store_index(tenant),
                      keys.stored_bytes(tenant),
                      *(keys.vector_store_chunks(tenant, vs_id, bytes(f).decode())
                        for f in files)],
                args=[vs_id])
        return bool(done)

    async def page(self, tenant: str, page: PageRequest
                   ) -> tuple[list[tuple[dict[str, Any], list[dict[str, Any]]]], bool]:
        def read(pipe: Any, vs_id: str) -> None:
            pipe.hget(keys.vector_store(tenant, vs_id), "obj")

        records, more = await index_page(self._client, keys.vector_store_index(tenant), read,
                                         page)

        async def files() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for record in records:
                    pipe.hvals(keys.vector_store_files(tenant, record["id"]))
                return await pipe.execute()

        found = await read_retrying(files) if records else []
        return [(r, [orjson.loads(f) for f in fs]) for r, fs in zip(records, found,
                                                                     strict=True)], more

    async def version(self, tenant: str, vs_id: str) -> int | None:
        """The store's search version (None: no such store)."""
        raw: Any = await read_retrying(
            lambda: self._client.hget(keys.vector_store(tenant, vs_id), "ver"))
        return None if raw is None else int(raw)

    # -- files -----------------------------------------------------------------------------
    async def add_files(self, tenant: str, vs_id: str, files: list[dict[str, Any]], *,
                        ttl: int, max_files: int, batch: dict[str, Any] | None = None) -> int:
        """1: added (in_progress); 0: no such store; -1: the store would hold too many."""
        args: list[Any] = [ttl, max_files, batch["id"] if batch else "",
                           orjson.dumps(batch) if batch else b""]
        for file in files:
            args += [file["id"], orjson.dumps(file)]
        with store_errors():
            done = await self._add(keys=[keys.vector_store(tenant, vs_id),
                                         keys.vector_store_files(tenant, vs_id),
                                         keys.vector_store_batches(tenant, vs_id)], args=args)
        return int(done)

    async def get_file(self, tenant: str, vs_id: str, file_id: str) -> dict[str, Any] | None:
        raw: Any = await read_retrying(
            lambda: self._client.hget(keys.vector_store_files(tenant, vs_id), file_id))
        return None if raw is None else dict(orjson.loads(raw))

    async def finish_file(self, tenant: str, file: dict[str, Any], chunks: StoredChunks | None,
                          *, began: dict[str, Any], ttl: int, max_chunks: int) -> int:
        """Store a file's end (its object; its chunks when it completed), if its entry is still
        `began` (the object its ingestion started from). 1: stored; 0: the store or the file is
        gone, or superseded; -1: the chunks would take the store past `max_chunks`."""
        vs_id, file_id = file["vector_store_id"], file["id"]
        n = len(chunks.texts) if chunks else 0
        args: list[Any] = [file_id, orjson.dumps(file), n, ttl, max_chunks,
                           chunks.vectors if chunks else b"",
                           orjson.dumps(chunks.texts) if chunks else b"",
                           orjson.dumps(chunks.meta) if chunks else b"",
                           chunks.dim if chunks else 0, orjson.dumps(began)]
        with store_errors():
            done = await self._finish(
                keys=[keys.vector_store(tenant, vs_id), keys.vector_store_files(tenant, vs_id),
                      keys.vector_store_chunks(tenant, vs_id, file_id),
                      keys.stored_bytes(tenant)], args=args)
        return int(done)

    async def delete_file(self, tenant: str, vs_id: str, file_id: str) -> bool:
        with store_errors():
            done = await self._delete_file(
                keys=[keys.vector_store(tenant, vs_id), keys.vector_store_files(tenant, vs_id),
                      keys.vector_store_chunks(tenant, vs_id, file_id),
                      keys.stored_bytes(tenant)], args=[file_id])
        return bool(done)

    async def get_batch(self, tenant: str, vs_id: str, batch_id: str) -> dict[str, Any] | None:
        raw: Any = await read_retrying(
            lambda: self._client.hget(keys.vector_store_batches(tenant, vs_id), batch_id))
        return None if raw is None else dict(orjson.loads(raw))

    async def load(self, tenant: str, vs_id: str, file_ids: list[str]) -> list[StoredChunks]:
        """The chunks of these files (those stored; one pipelined round trip)."""
        if not file_ids:
            return []

        async def read() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for file_id in file_ids:
                    pipe.hmget(keys.vector_store_chunks(tenant, vs_id, file_id),
                               ["v", "d", "t", "m"])
                return await pipe.execute()

        out: list[StoredChunks] = []
        for vectors, dim, texts, meta in await read_retrying(read):
            if vectors is None or dim is None or texts is None or meta is None:
                continue  # deleted between the listing and this read
            out.append(StoredChunks(orjson.loads(meta), bytes(vectors), int(dim),
                                    orjson.loads(texts)))
        return out
