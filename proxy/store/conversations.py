"""Conversations in Redis: the conversation half of `RedisStore` (its base class) and the Lua
scripts it runs, kept together because nothing else runs them.

Layout (keys.py): `cv:{<id>}` HASH (tenant, obj, meta, next, and the storage ledger's bytes and
until), `cv:{<id>}:order` ZSET of item ids by insertion number, `cv:{<id>}:items` HASH of item
bodies. The three keys share the conversation's hash tag, so each script touches one slot, but
for the owner's storage ledger (store/budget/ledger.py), which every write that renews the TTL or
changes the size updates in the same script. Conventions as in scripts.py: tenancy checked in
the script that writes (a foreign tenant changes nothing and learns nothing), no JSON decoded
in Lua, every key written gets its TTL renewed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from proxy.core.errors import InvalidRequest
from proxy.core.policy.storagebudget import StorageBudget, storage_exceeded
from proxy.core.shardtags import TAGS, tag_of
from proxy.core.types import Item
from proxy.store import keys
from proxy.store.base import MAX_CONVERSATION_ITEMS, ItemPage
from proxy.store.budget.ledger import LEDGER
from proxy.store.budget.ledgerview import ByTag, LedgerView
from proxy.store.connection.failures import read_retrying, store_errors

T = TypeVar("T")
# What the conversation scripts answer besides 1 / 0.
_OVER_ITEM_CAP = -1
_OVER_BUDGET = -2

# KEYS for every conversation script: hash, order, items, ledger (the owner's, ledger.py).
# A conversation's bytes (object, metadata, items) move in its owner's ledger with every write
# that renews its TTL; creates and appends through the API are refused, writing nothing, when
# the key already holds its budget (ARGV budget > 0); a turn's own append (budget '0') is not.

# `add_items(from, max)`: append the (id, json) pairs of ARGV from index `from` on, in order,
# unless the conversation would then hold more than `max` items (checked before writing
# anything: false). An id already present keeps its place and gets the new body (a retried
# append). Returns the bytes the items hold now minus what they held before.
# `stored_bytes()`: what the ledger counts for the conversation (`bytes`), or, for one stored
# before the ledger existed, its size measured once.
# `refused(budget, sec)`: the key's ledger already holds `budget` bytes or more.
_CONVERSATION: Final = LEDGER + """
local function add_items(from, max)
  local new = 0
  for i = from, #ARGV, 2 do
    if not redis.call('ZSCORE', KEYS[2], ARGV[i]) then new = new + 1 end
  end
  if redis.call('ZCARD', KEYS[2]) + new > max then return false end
  local next = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
  local added = 0
  for i = from, #ARGV, 2 do
    if redis.call('ZADD', KEYS[2], 'NX', next, ARGV[i]) == 1 then next = next + 1 end
    added = added + #ARGV[i + 1] - redis.call('HSTRLEN', KEYS[3], ARGV[i])
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
  redis.call('HSET', KEYS[1], 'next', next)
  return added
end

local function stored_bytes()
  local known = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '')
  if known then return known end
  local size = redis.call('HSTRLEN', KEYS[1], 'obj') + redis.call('HSTRLEN', KEYS[1], 'meta')
  for _, id in ipairs(redis.call('HKEYS', KEYS[3])) do
    size = size + redis.call('HSTRLEN', KEYS[3], id)
  end
  return size
end

local function refused(budget, sec)
  local held = ledger_held(KEYS[4], sec)
  return tonumber(budget) > 0 and held >= tonumber(budget)
end

-- A conversation's three keys live and die together; its bytes move with them.
local function expire_all(ttl, size, sec)
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
  ledger_set(KEYS[4], KEYS[1], sec, size, ledger_until(sec, ttl))
end
"""

# ARGV: tenant, ttl, max, budget, obj, meta, (id, json)*
# Returns 1, -1 over the item cap, -2 over the storage budget. A re-used id starts from an
# empty item list (ids are the proxy's, random: its old bytes, if any, just expire).
CREATE_CONVERSATION: Final = _CONVERSATION + """
local sec = ledger_now()
if refused(ARGV[4], sec) then return -2 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'obj', ARGV[5], 'meta', ARGV[6], 'next', 0)
local added = add_items(7, tonumber(ARGV[3]))
if not added then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return -1
end
expire_all(ARGV[2], #ARGV[5] + #ARGV[6] + added, sec)
return 1
"""

# ARGV: tenant, ttl, max, budget, (id, json)*
# Returns 1, 0 if unknown to this tenant, -1 over the item cap, -2 over the storage budget.
ADD_CONVERSATION_ITEMS: Final = _CONVERSATION + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
local sec = ledger_now()
if refused(ARGV[4], sec) then return -2 end
local size = stored_bytes()
local added = add_items(5, tonumber(ARGV[3]))
if not added then return -1 end
expire_all(ARGV[2], size + added, sec)
return 1
"""

# One page of items. ARGV: tenant, after ('' = from the start), limit, order ('asc' | 'desc').
# Returns nil if unknown to this tenant, else {has_more (1|0), item json*}. An unknown `after`
# gives an empty page. One item past the page is fetched to learn has_more.
LIST_CONVERSATION_ITEMS: Final = """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return false end
local desc = ARGV[4] == 'desc'
local start = 0
if ARGV[2] ~= '' then
  local rank
  if desc then
    rank = redis.call('ZREVRANK', KEYS[2], ARGV[2])
  else
    rank = redis.call('ZRANK', KEYS[2], ARGV[2])
  end
  if not rank then return {0} end
  start = rank + 1
end
local limit = tonumber(ARGV[3])
local ids
if desc then
  ids = redis.call('ZRANGE', KEYS[2], start, start + limit, 'REV')
else
  ids = redis.call('ZRANGE', KEYS[2], start, start + limit)
end
local page = {0}
if #ids > limit then page[1] = 1 end
for i = 1, math.min(#ids, limit) do
  page[#page + 1] = redis.call('HGET', KEYS[3], ids[i])
end
return page
"""

# Replace the metadata (a few hundred bytes at most: never refused, still counted).
# ARGV: tenant, ttl, meta. Returns nil if unknown, else {obj, meta}.
UPDATE_CONVERSATION: Final = _CONVERSATION + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return false end
local size = stored_bytes() - redis.call('HSTRLEN', KEYS[1], 'meta') + #ARGV[3]
redis.call('HSET', KEYS[1], 'meta', ARGV[3])
expire_all(ARGV[2], size, ledger_now())
return redis.call('HMGET', KEYS[1], 'obj', 'meta')
"""

# ARGV: tenant. Returns 1 if deleted (with all its items; its bytes leave the ledger), else 0.
DELETE_CONVERSATION: Final = LEDGER + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
ledger_set(KEYS[4], KEYS[1], ledger_now(), 0, 0)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
"""

# ARGV: tenant, item id. Returns 1 if the item was removed (from the order too), else 0. Its
# bytes leave the ledger; the TTL is not renewed, so the rest stays in its bucket.
DELETE_CONVERSATION_ITEM: Final = _CONVERSATION + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
if not redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 0 end
local ends = tonumber(redis.call('HGET', KEYS[1], 'until') or '')
if ends then  -- else stored before the ledger: counted at its next append
  ledger_set(KEYS[4], KEYS[1], ledger_now(),
             stored_bytes() - redis.call('HSTRLEN', KEYS[3], ARGV[2]), ends)
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
"""


class RedisConversations:
    """Conversations on `client`, bytes counted in each owner's ledger and bounded by
    `budget` (core/policy/storagebudget.py)."""

    def __init__(self, client: Redis, budget: StorageBudget, *, sharded: bool = False) -> None:
        self._client = client
        self._budget = budget
        # On a Redis Cluster: responses and conversations carry shard tags (core/shardtags.py),
        # each tag has its own ledger per key, and an untagged id names nothing.
        self.sharded = sharded
        self._ledgers = LedgerView(self._read_ledgers) if sharded else None
        self._conv_create = client.register_script(CREATE_CONVERSATION)
        self._conv_add = client.register_script(ADD_CONVERSATION_ITEMS)
        self._conv_list = client.register_script(LIST_CONVERSATION_ITEMS)
        self._conv_update = client.register_script(UPDATE_CONVERSATION)
        self._conv_delete = client.register_script(DELETE_CONVERSATION)
        self._conv_delete_item = client.register_script(DELETE_CONVERSATION_ITEM)

    async def _read(self, op: Callable[[], Awaitable[T]]) -> T:
        return await read_retrying(op)

    async def _pipelined(self, queue: Callable[[Pipeline], object], *,
                         transaction: bool = False) -> list[Any]:
        """One round trip for everything `queue` puts in the pipeline."""
        async with self._client.pipeline(transaction=transaction) as pipe:
            queue(pipe)
            return await pipe.execute()

    def _untagged(self, object_id: str) -> bool:
        """True for an id that cannot name anything here: untagged, on a cluster (every id
        made there is tagged; an untagged one's script would span two slots)."""
        return self.sharded and tag_of(object_id) is None

    async def _room(self, tenant: str, tag: str | None) -> tuple[int, int]:
        """(the key's budget, what the script writing under `tag` may let its ledger hold).
        On a cluster the key's bytes sit in one ledger per tag: the others' sum (ledgerview.py:
        as of at most a second ago) is taken off the budget, and the script checks its own
        tag's exactly. No budget, or one primary: the budget itself, no round trip."""
        budget = self._budget.of(tenant)
        if budget <= 0 or self._ledgers is None:
            return budget, budget
        elsewhere = await self._ledgers.elsewhere(tenant, tag)
        if elsewhere >= budget:
            raise storage_exceeded(budget, elsewhere)
        return budget, budget - elsewhere

    async def _read_ledgers(self, tenant: str) -> ByTag:
        """Bytes the key holds in each of its ledgers (the untagged one, one per tag), in one
        pipeline (per node on a cluster). Buckets are summed here rather than by a script per
        ledger; ones whose end has passed (by this host's clock, a bucket being a 30th of the
        TTL wide) do not count."""
        tags = (None, *TAGS)

        def queue(pipe: Pipeline) -> None:
            for tag in tags:
                pipe.hgetall(keys.stored_bytes(tenant, tag))

        now = time.time()
        replies = await self._read(lambda: self._pipelined(queue))
        return {tag: sum(int(size) for end, size in buckets.items() if int(end) > now)
                for tag, buckets in zip(tags, replies, strict=True)}

    def _wrote(self, tenant: str) -> None:
        """This instance changed the key's ledgers: its view is read again at the next check."""
        if self._ledgers is not None:
            self._ledgers.forget(tenant)

    async def create_conversation(self, tenant: str, conversation: dict[str, Any],
                                  items: Sequence[Item], *, ttl: int) -> None:
        check_ttl(ttl)
        if len(items) > MAX_CONVERSATION_ITEMS:
            raise _too_many_items()
        body = {k: v for k, v in conversation.items() if k != "metadata"}
        budget, room = await self._room(tenant, tag_of(str(conversation["id"])))
        args: list[Any] = [tenant, ttl, MAX_CONVERSATION_ITEMS, room, orjson.dumps(body),
                           orjson.dumps(conversation.get("metadata") or {}), *_item_args(items)]
        with store_errors():
            done = await self._conv_create(
                keys=_conversation_keys(tenant, str(conversation["id"])), args=args)
        self._wrote(tenant)
        _check_written(done, budget)

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        values: Any = await self._read(lambda: self._client.hmget(
            keys.conversation(conversation_id), keys.F_TENANT, keys.F_CONV_OBJECT,
            keys.F_CONV_META))
        owner, obj, meta = values
        if owner is None or owner != tenant.encode():
            return None
        return _conversation(obj, meta)

    async def update_conversation(self, tenant: str, conversation_id: str,
                                  metadata: dict[str, str] | None, *,
                                  ttl: int) -> dict[str, Any] | None:
        check_ttl(ttl)
        if self._untagged(conversation_id):
            return None
        args: list[Any] = [tenant, ttl, orjson.dumps(metadata or {})]
        with store_errors():
            reply = await self._conv_update(keys=_conversation_keys(tenant, conversation_id),
                                            args=args)
        return None if reply is None else _conversation(reply[0], reply[1])

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        if self._untagged(conversation_id):
            return False
        with store_errors():
            done = await self._conv_delete(keys=_conversation_keys(tenant, conversation_id),
                                           args=[tenant])
        self._wrote(tenant)
        return bool(done)

    async def add_conversation_items(self, tenant: str, conversation_id: str,
                                     items: Sequence[Item], *, ttl: int,
                                     bounded: bool = True) -> bool:
        check_ttl(ttl)
        if len(items) > MAX_CONVERSATION_ITEMS:
            raise _too_many_items()
        if self._untagged(conversation_id):
            return False
        budget, room = await self._room(tenant, tag_of(conversation_id)) if bounded else (0, 0)
        args: list[Any] = [tenant, ttl, MAX_CONVERSATION_ITEMS, room, *_item_args(items)]
        with store_errors():
            done = await self._conv_add(keys=_conversation_keys(tenant, conversation_id),
                                        args=args)
        self._wrote(tenant)
        _check_written(done, budget)
        return bool(done == 1)

    async def list_conversation_items(self, tenant: str, conversation_id: str, *,
                                      after: str | None, limit: int,
                                      order: str) -> ItemPage | None:
        args: list[Any] = [tenant, after or "", limit, order]
        reply = await self._read(
            lambda: self._conv_list(keys=_conversation_keys(tenant, conversation_id)[:3],
                                    args=args))
        if reply is None:
            return None
        return ItemPage(items=[orjson.loads(raw) for raw in reply[1:] if raw is not None],
                        has_more=reply[0] == 1)

    async def all_conversation_items(self, tenant: str,
                                     conversation_id: str) -> list[Item] | None:
        # MULTI/EXEC: the order and the bodies come from one consistent snapshot.
        def queue(pipe: Pipeline) -> None:
            pipe.hget(keys.conversation(conversation_id), keys.F_TENANT)
            pipe.zrange(keys.conversation_order(conversation_id), 0, -1)
            pipe.hgetall(keys.conversation_items(conversation_id))

        owner, ids, bodies = await self._read(lambda: self._pipelined(queue, transaction=True))
        if owner is None or owner != tenant.encode():
            return None
        return [orjson.loads(bodies[item_id]) for item_id in ids if item_id in bodies]

    async def get_conversation_item(self, tenant: str, conversation_id: str,
                                    item_id: str) -> Item | None:
        def queue(pipe: Pipeline) -> None:
            pipe.hget(keys.conversation(conversation_id), keys.F_TENANT)
            pipe.hget(keys.conversation_items(conversation_id), item_id)

        owner, raw = await self._read(lambda: self._pipelined(queue))
        if owner is None or owner != tenant.encode() or raw is None:
            return None
        item: Item = orjson.loads(raw)
        return item

    async def delete_conversation_item(self, tenant: str, conversation_id: str,
                                       item_id: str) -> bool:
        if self._untagged(conversation_id):
            return False
        with store_errors():
            done = await self._conv_delete_item(
                keys=_conversation_keys(tenant, conversation_id), args=[tenant, item_id])
        self._wrote(tenant)
        return bool(done)


def check_ttl(*ttls: int) -> None:
    # EXPIRE with 0 or less deletes the key at once: a zero TTL is a bug, not "no expiry".
    # `min`, not `any` over a generator: its steps were three calls per check. (The stored
    # answer's create and final write test their TTLs inline and call this only to say why.)
    if min(ttls) <= 0:
        raise ValueError(f"TTLs must be positive seconds, got {ttls}")


def _conversation_keys(tenant: str, conversation_id: str) -> list[str]:
    return [keys.conversation(conversation_id), keys.conversation_order(conversation_id),
            keys.conversation_items(conversation_id),
            keys.stored_bytes(tenant, tag_of(conversation_id))]


def _item_args(items: Sequence[Item]) -> list[Any]:
    args: list[Any] = []
    for item in items:
        args += (str(item["id"]), orjson.dumps(item))
    return args


def _conversation(obj: bytes, meta: bytes | None) -> dict[str, Any]:
    conversation: dict[str, Any] = orjson.loads(obj)
    conversation["metadata"] = orjson.loads(meta) if meta else {}
    return conversation


def _check_written(done: int, budget: int) -> None:
    if done == _OVER_ITEM_CAP:
        raise _too_many_items()
    if done == _OVER_BUDGET:
        raise storage_exceeded(budget)


def _too_many_items() -> InvalidRequest:
    return InvalidRequest(
        f"A conversation holds at most {MAX_CONVERSATION_ITEMS} items.", param="items")
