"""Prompt templates in Redis (`/v1/prompts`, services/responses/prompts.py).

One HASH per prompt, `pm:{<tenant>}:<id>` (keys.py): field `<n>` → version n's object (JSON),
`cur` → the latest version's, `latest` → n, and the storage ledger's `bytes`/`until` (a prompt's
versions count in the key's budget, ledger.py). The version number is given by the script that
writes it, so two concurrent updates get two versions; the object is sent without its closing
brace and the script appends `"version":"<n>"}` (no JSON decoded in Lua). The list ZSET and the
ledger share the tenant's tag: each script touches one slot. A prompt lives `--response-ttl`
from its latest version.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from redis.asyncio import Redis

from proxy.core.prompts import MAX_VERSIONS
from proxy.core.request.paging import PageRequest
from proxy.store import keys
from proxy.store.budget.ledger import LEDGER
from proxy.store.connection.failures import read_retrying, store_errors
from proxy.store.objects.listing import index_page

TOO_MANY: Final = -1

# KEYS: record, list, ledger. ARGV: object JSON without its closing brace, ttl, created_at, id,
# '1' when the prompt must exist (a new version) / '0' (a new prompt), max versions.
# Returns the version number, 0 (no such prompt) or TOO_MANY.
_ADD: Final = LEDGER + """
local exists = redis.call('EXISTS', KEYS[1]) == 1
if ARGV[5] == '1' and not exists then return 0 end
local n = tonumber(redis.call('HGET', KEYS[1], 'latest') or '0') + 1
if n > tonumber(ARGV[6]) then return -1 end
local obj = ARGV[1] .. ',"version":"' .. n .. '"}'
redis.call('HSET', KEYS[1], 'latest', n, tostring(n), obj, 'cur', obj)
local ttl = tonumber(ARGV[2])
redis.call('EXPIRE', KEYS[1], ttl)
if not exists then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4]) end
if redis.call('TTL', KEYS[2]) < ttl then redis.call('EXPIRE', KEYS[2], ttl) end
local now = ledger_now()
local size = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0') + 2 * #obj
ledger_set(KEYS[3], KEYS[1], now, size, ledger_until(now, ttl))
return n
"""

# KEYS: record, list, ledger. ARGV: id.
_DELETE: Final = LEDGER + """
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
ledger_set(KEYS[3], KEYS[1], ledger_now(), 0, 0)
redis.call('DEL', KEYS[1])
return 1
"""


class RedisPrompts:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._add = client.register_script(_ADD)
        self._delete = client.register_script(_DELETE)

    def _keys(self, tenant: str, prompt_id: str) -> list[str]:
        return [keys.prompt_record(tenant, prompt_id), keys.prompt_index(tenant),
                keys.stored_bytes(tenant)]

    async def add_version(self, tenant: str, prompt: dict[str, Any], *, ttl: int,
                          new: bool) -> int:
        """Store `prompt` (no `version` in it) as its next version: the number given, 0 when
        `new` is False and the prompt does not exist, TOO_MANY past MAX_VERSIONS."""
        body = orjson.dumps(prompt)[:-1]
        with store_errors():
            got = await self._add(keys=self._keys(tenant, str(prompt["id"])),
                                  args=[body, ttl, int(prompt["created_at"]), prompt["id"],
                                        "0" if new else "1", MAX_VERSIONS])
        return int(got)

    async def get(self, tenant: str, prompt_id: str, version: str | None
                  ) -> dict[str, Any] | None:
        record = keys.prompt_record(tenant, prompt_id)
        raw = await read_retrying(lambda: self._client.hget(record, version or "cur"))
        return None if raw is None else dict(orjson.loads(raw))

    async def delete(self, tenant: str, prompt_id: str) -> bool:
        with store_errors():
            return bool(await self._delete(keys=self._keys(tenant, prompt_id),
                                           args=[prompt_id]))

    async def list(self, tenant: str, page: PageRequest) -> tuple[list[dict[str, Any]], bool]:
        def read(pipe: Any, prompt_id: str) -> None:
            pipe.hget(keys.prompt_record(tenant, prompt_id), "cur")

        return await index_page(self._client, keys.prompt_index(tenant), read, page)
