"""How the store's replies become objects (store/redis.py): records, events, items, the results
of the status scripts. Objects cross as orjson bytes and are decoded only here and in redis.py;
Lua never parses JSON."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from proxy.core.types import Item, ResponseObject
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent, Transition


def held_items(holders: Sequence[str], replies: Iterator[Any], tenant: str) -> list[Item]:
    """The items of those holders (`find_items`' second read) that belong to `tenant`."""
    items: list[Item] = []
    for holder in holders:
        if holder.startswith(keys.ITEM_IN_OUTPUT + ":"):
            owner, obj = next(replies)
            held = (orjson.loads(obj).get("output") or []) if obj else []
        else:
            (owner,), raw = next(replies), next(replies)
            held = items_of(raw)
        if owner is not None and owner.decode() == tenant:
            items += held
    return items


def item_ids(items: Sequence[Item]) -> list[str]:
    """The ids the item index (keys.py) gets entries for: those of the items with one."""
    return [str(item["id"]) for item in items if isinstance(item, dict) and item.get("id")]


def event_of(entry_id: bytes, fields: dict[bytes, bytes]) -> StoredEvent:
    return StoredEvent(seq=int(entry_id.split(b"-", 1)[1]), type=fields[b"t"].decode(),
                       data=fields[b"d"])


def items_of(raw: bytes | None) -> list[Item]:
    return orjson.loads(raw) if raw else []


def record_of(values: Sequence[Any]) -> ResponseRecord | None:
    status, tenant, obj, parents, logged, closed = values
    if status is None or tenant is None or obj is None:
        return None
    response: ResponseObject = orjson.loads(obj)
    response["status"] = status.decode()
    return ResponseRecord(
        response=response, tenant=tenant.decode(),
        parents=tuple(orjson.loads(parents)) if parents else (),
        logged=logged == b"1", closed=closed == b"1",
    )


def transition_of(reply: Any) -> Transition:
    if reply is None:
        return Transition(changed=False, response=None)
    changed, status, obj = reply
    response: ResponseObject = orjson.loads(obj)
    response["status"] = status.decode()
    return Transition(changed=changed == 1, response=response)
