"""Live tails of event logs: one blocking reader per process, fanned out to its local clients.

A follower first reads what is already stored (`read_events`), then joins the hub. The hub runs
one `Store.tail` (Redis: one `XREAD BLOCK` over every followed log) at a time, from the lowest
position any local follower of each log has reached, and hands each new event to every
follower whose position is below it. Positions advance on hand-over, so an event is delivered
once per follower however the reads overlap, and nothing appended between a follower's own
read and its joining is missed (the hub reads from the follower's position).

A follower that joins while the hub is blocked is picked up when that read returns, at most
`block_ms` later; that bounds the join delay, never the steady-state latency (a blocked read
returns as soon as any followed log grows).

Events written by this very process (a background job run by the in-process worker, a stream
replayed on the instance that serves it) are also handed over locally the moment they are made
(`publish_local`), before the batched write reaches Redis. A local event is taken only if it is
the very next one a follower needs (seq == position + 1); anything else is left to the Redis
tail, so the two sources never reorder or skip events. A follower that joins while the log is
being written here first catches up from the writer's memory (`recent`), in the same step as it
joins: events made while it read the store can then not fall between the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from proxy.core import types as t
from proxy.core.errors import StoreUnavailable
from proxy.store.base import Store, StoredEvent

log = logging.getLogger("proxy.follow")


class FollowInterrupted(Exception):
    """The hub lost the store while a follower waited."""


@dataclass(eq=False)
class _Follower:
    """One reader's inbox. A deque and one future, not an `asyncio.Queue` with `wait_for`:
    this runs once per event per reader, and `wait_for` makes a task each time."""

    position: int
    items: deque[StoredEvent | Exception] = field(default_factory=deque)
    waiter: asyncio.Future[None] | None = None

    def put(self, item: StoredEvent | Exception) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, idle: float) -> bool:
        """Until something arrives (True) or `idle` seconds pass (False)."""
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = loop.call_later(idle, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None
        return bool(self.items)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Followers:
    def __init__(self, store: Store, *, block_ms: int = 50, retry_delay: float = 0.5,
                 recent: Callable[[str], list[StoredEvent]] = lambda _rid: []) -> None:
        self._store = store
        self.recent = recent  # the events this process is writing for a log (eventlog.py)
        self._block_ms = block_ms
        self._retry_delay = retry_delay
        self._followers: dict[str, set[_Follower]] = {}
        self._task: asyncio.Task[None] | None = None

    async def follow(self, response_id: str, *, after: int,
                     idle: float) -> AsyncIterator[StoredEvent]:
        """Events with seq > after, stored then live, ending after the terminal event, or
        when none arrives for `idle` seconds (the caller decides whether to go on)."""
        follower = _Follower(after)
        for event in await self._store.read_events(response_id, after=after):
            follower.put(event)
            follower.position = event.seq
        # No await from here to the join: what the store did not have yet, this process's
        # writer (if it is here) has in memory; anything later reaches the joined follower.
        for event in self.recent(response_id):
            if event.seq == follower.position + 1:
                follower.put(event)
                follower.position = event.seq
        self._join(response_id, follower)
        try:
            while True:
                if not follower.items and not await follower.wait(idle):
                    return
                item = follower.items.popleft()
                if isinstance(item, Exception):
                    raise item
                yield item
                if item.type in t.TERMINAL_EVENTS:
                    return
        finally:
            self._leave(response_id, follower)

    def publish_local(self, response_id: str, event: StoredEvent) -> None:
        """An event this process just made for `response_id` (called per event: one dict
        lookup when nobody here follows that log)."""
        group = self._followers.get(response_id)
        if not group:
            return
        for follower in group:
            if event.seq == follower.position + 1:
                follower.put(event)
                follower.position = event.seq

    def _join(self, response_id: str, follower: _Follower) -> None:
        self._followers.setdefault(response_id, set()).add(follower)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="event-log-follower")

    def _leave(self, response_id: str, follower: _Follower) -> None:
        group = self._followers.get(response_id)
        if group is not None:
            group.discard(follower)
            if not group:
                del self._followers[response_id]

    async def _run(self) -> None:
        while self._followers:
            positions = {rid: min(f.position for f in group)
                         for rid, group in self._followers.items()}
            try:
                found = await self._store.tail(positions, block_ms=self._block_ms)
            except StoreUnavailable as exc:
                self._interrupt_all(exc)
                await asyncio.sleep(self._retry_delay)
                continue
            for rid, events in found.items():
                for follower in self._followers.get(rid, ()):
                    for event in events:
                        if event.seq > follower.position:
                            follower.put(event)
                            follower.position = event.seq

    def _interrupt_all(self, exc: Exception) -> None:
        log.warning("event log tail failed; %d follower(s) interrupted: %s",
                    sum(len(g) for g in self._followers.values()), exc)
        for group in self._followers.values():
            for follower in group:
                follower.put(FollowInterrupted(str(exc)))
        self._followers.clear()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
