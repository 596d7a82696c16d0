"""The writes that end a turn, made durable: retried (bounded) and reconciled.

A turn that ends must leave its stored object terminal, or it stays `in_progress` for the
response TTL and its replays wait for nothing. So the final write (`Store.finish_response`) and
the writes that depend on it (the conversation append) are retried a bounded number of times
when the store is unavailable. Each is safe to repeat:
- `finish_response` is a compare-and-set: a retry after an attempt that *was* applied (a reply
  lost to a timeout) finds the status already terminal and answers changed=False with the stored
  object. `store_final` then compares that object with ours: the same final object means our
  write landed, and the turn goes on as if the first reply had arrived (`reconcile`). The
  stream's last events that the write carries (services/eventlog/writer.py) landed with it, once:
  the refused retry appends nothing, and the log skips any event whose seq it already holds.
- the conversation append adds items by id (`ZADD NX`, `HSET`): a repeated append is a no-op.
The conversation lives under another hash tag than the response (Redis Cluster slots), so it
cannot share the final write's script: it is idempotent and retried instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import orjson

from proxy.core.errors import StoreUnavailable, failure_cause
from proxy.core.types import Item, ResponseObject
from proxy.store.base import EventRow, Store, StoredEvent, Transition

log = logging.getLogger("proxy.durable")
T = TypeVar("T")

# Seconds between attempts of a write that ends a turn: five tries over about four seconds,
# enough to ride out a Redis failover or a dropped connection, short enough that a worker does
# not hold a finished job for long. A test shortens them through `retry_delays`.
RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 0.5, 1.0, 2.0)


async def retried(what: str, op: Callable[[], Awaitable[T]],
                  delays: Sequence[float] | None = None, *,
                  reconnect: Callable[[], Awaitable[None]] | None = None,
                  failed: bool = False) -> T:
    """`op()`, tried again after each delay while the store is unavailable; the last failure
    is raised. Only `StoreUnavailable` is retried: any other error is not transient.
    `reconnect` (`Store.reconnect`) runs before each retry: it drops connections that may
    point at a stuck or replaced primary and fails in about a second when the store still
    does not answer, so a retry on a frozen primary costs that, not another socket timeout
    (16 streams ending on one stayed stuck 30 s, each of 6 attempts waiting 5 s). `failed`:
    an attempt was made already and failed (this one is a retry: it reconnects first)."""
    for delay in RETRY_DELAYS if delays is None else delays:
        try:
            if failed and reconnect is not None:
                await reconnect()
            return await op()
        except StoreUnavailable as exc:
            failed = True
            log.warning("%s failed, retrying in %.2fs: %s", what, delay, failure_cause(exc))
        await asyncio.sleep(delay)
    if failed and reconnect is not None:
        await reconnect()
    return await op()


def reconcile(result: Transition, final: ResponseObject) -> Transition:
    """A compare-and-set that answered "not changed" with exactly our final object was our own
    write, applied by an earlier attempt whose reply was lost."""
    if not result.changed and result.response is not None and \
            result.response == orjson.loads(orjson.dumps(final)):
        return Transition(True, result.response)
    return result


async def store_final(store: Store, final: ResponseObject, terminal: StoredEvent | None, *,
                      tenant: str, ttl: int, event_ttl: int,
                      events: Sequence[EventRow] = (),
                      delays: Sequence[float] | None = None) -> Transition:
    """The final write, retried and reconciled; `events` (the stream's last unflushed ones)
    go to the log with it, before `terminal`. `tenant`: the response's owner."""
    # The first attempt made here, not through `retried`: nearly always the only one, and
    # `retried`'s frame, the attempt's closure and the description formatted for a warning
    # that is not written cost ~4 µs per stored answer.
    try:
        result = await store.finish_response(final, terminal, tenant=tenant, ttl=ttl,
                                             event_ttl=event_ttl, events=events)
    except StoreUnavailable as exc:
        plan = RETRY_DELAYS if delays is None else delays
        if not plan:
            raise
        what = f"final write of {final.get('id')}"
        log.warning("%s failed, retrying in %.2fs: %s", what, plan[0], failure_cause(exc))
        await asyncio.sleep(plan[0])

        async def attempt() -> Transition:
            result = await store.finish_response(final, terminal, tenant=tenant, ttl=ttl,
                                                 event_ttl=event_ttl, events=events)
            return reconcile(result, final)

        return await retried(what, attempt, plan[1:], reconnect=store.reconnect, failed=True)
    return result if result.changed else reconcile(result, final)


async def append_conversation(store: Store, tenant: str, conversation_id: str,
                              items: Sequence[Item], *, ttl: int,
                              delays: Sequence[float] | None = None) -> None:
    async def attempt() -> None:
        # The turn ran: its items are counted, never refused (the storage budget was checked
        # before it started, store/base.py).
        await store.add_conversation_items(tenant, conversation_id, items, ttl=ttl,
                                           bounded=False)

    await retried(f"conversation append to {conversation_id}", attempt, delays,
                  reconnect=store.reconnect)
