"""One page of a per-key object list kept as a ZSET of ids scored by creation time (files,
prompts: keys.py), the objects read from their own keys. Ids whose object has expired (its key
went with its TTL) are skipped and dropped from the ZSET on the way, so the list never needs a
scan to stay clean.

Bounded: at most `MAX_ROUNDS` reads of `2 * limit` ids each; a page the filter leaves short
says `has_more` when ids remain past the last read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
from redis.asyncio import Redis

from proxy.core.request.paging import PageRequest
from proxy.store.connection.failures import read_retrying, store_errors

MAX_ROUNDS = 10

# The object's JSON (or None: gone) for an id: one pipelined command per id.
Reader = Callable[[Any, str], None]


async def index_page(client: Redis, index: str, read: Reader, page: PageRequest,
                     keep: Callable[[dict[str, Any]], bool] = lambda _: True,
                     ) -> tuple[list[dict[str, Any]], bool]:
    """(the objects of the page, has_more). `read(pipe, id)` queues the read of one object's
    JSON; `keep` filters (a purpose)."""
    descending = page.order == "desc"
    start = 0
    after = page.after
    if after is not None:
        rank_of = client.zrevrank if descending else client.zrank
        rank: Any = await read_retrying(lambda: rank_of(index, after))
        if rank is None:
            return [], False
        start = int(rank) + 1
    out: list[dict[str, Any]] = []
    batch = 2 * page.limit
    span = client.zrevrange if descending else client.zrange
    for _ in range(MAX_ROUNDS):
        found: Any = await read_retrying(
            functools.partial(span, index, start, start + batch - 1))
        ids = [bytes(i).decode() for i in found]
        if not ids:
            return out, False
        async with client.pipeline(transaction=False) as pipe:
            for object_id in ids:
                read(pipe, object_id)
            raws = await read_retrying(pipe.execute)
        gone = [object_id for object_id, raw in zip(ids, raws, strict=True) if raw is None]
        if gone:
            with store_errors():
                await client.zrem(index, *gone)
        for raw in raws:
            if raw is None:
                continue
            obj = orjson.loads(raw)
            if keep(obj):
                if len(out) == page.limit:
                    return out, True
                out.append(obj)
        # Dropped ids moved the ranks: the next read starts where this one ended, less them.
        start += len(ids) - len(gone)
        if len(ids) < batch:
            return out, False
    return out, True
