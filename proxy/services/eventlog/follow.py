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

A follower that joins the live tail of a log written elsewhere marks the response followed
(`Store.mark_followed`, once per follow): that writer holds an unfollowed stream's events back
for longer log entries (services/eventlog/writer.py) and, told by its next flush, stops doing so
for this one. The mark is best effort: without it the follower still gets every event, up to
the writer's longer hold later.

Memory is bounded per reader. The catch-up from the store is read and yielded page by page
(`pages.py`). A follower's inbox holds at most `MAX_BACKLOG` events: a reader slower than the
log is dropped from the fan-out (the hub no longer holds its position back, nothing more is
queued for it), drains what it has, then catches up from the store in pages and joins again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Container, Sequence
from dataclasses import dataclass, field

from proxy.core import types as t
from proxy.core.errors import ProxyError, StoreUnavailable, failure_cause
from proxy.services.eventlog.pages import log_pages
from proxy.services.process.loops import LoopSupervisor
from proxy.store.base import Store, StoredEvent

log = logging.getLogger("proxy.follow")


# Events queued for one follower before it counts as too slow and is dropped from the fan-out.
MAX_BACKLOG = 1024


class FollowInterrupted(Exception):
    """The hub lost the store while a follower waited."""


@dataclass(eq=False)
class _Follower:
    """One reader's inbox. A deque and one future, not an `asyncio.Queue` with `wait_for`:
    this runs once per event per reader, and `wait_for` makes a task each time."""

    position: int
    items: deque[StoredEvent | Exception] = field(default_factory=deque)
    waiter: asyncio.Future[None] | None = None
    dropped: bool = False  # too slow: no longer fed; catches up from the store

    def put(self, item: StoredEvent | Exception) -> None:
        self.items.append(item)
        self._wake()

    def offer(self, event: StoredEvent) -> bool:
        """Queue `event` if it is the next one and the inbox has room; a full inbox drops the
        follower (False from then on)."""
        if self.dropped or event.seq <= self.position:
            return False
        if len(self.items) >= MAX_BACKLOG:
            self.dropped = True
            self._wake()
            return False
        self.items.append(event)
        self.position = event.seq
        self._wake()
        return True

    def _wake(self) -> None:
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
                 recent: Callable[[str], list[StoredEvent]] = lambda _rid: [],
                 writing: Callable[[str], bool] = lambda _rid: False,
                 supervisor: LoopSupervisor | None = None) -> None:
        self._store = store
        self.recent = recent  # the events this process is writing for a log (writer.py)
        self.writing = writing  # whether this process writes that log (else: mark it followed)
        self._block_ms = block_ms
        self._retry_delay = retry_delay
        self._followers: dict[str, set[_Follower]] = {}
        self._task: asyncio.Task[None] | None = None
        self._supervisor = supervisor or LoopSupervisor()  # restarts a crashed reader

    async def follow(self, response_id: str, *, after: int,
                     idle: float) -> AsyncIterator[StoredEvent]:
        """Events with seq > after, stored then live, ending after the terminal event, or
        when none arrives for `idle` seconds (the caller decides whether to go on)."""
        position = after
        marked = False
        while True:  # one round per (re)join: a dropped follower catches up and comes back
            async for page in log_pages(self._store, response_id, after=position):
                for event in page:
                    yield event
                    position = event.seq
                    if event.type in t.TERMINAL_EVENTS:
                        return
            follower = _Follower(position)
            # No await from here to the join: what the store did not have yet, this process's
            # writer (if it is here) has in memory; anything later reaches the joined follower.
            for event in self.recent(response_id):
                if event.seq == follower.position + 1:
                    follower.offer(event)
            self._join(response_id, follower)
            if not marked and not self.writing(response_id):
                marked = True
                await self._mark(response_id)
            async for item in self._live(response_id, follower, idle):
                yield item
            if not follower.dropped:
                return
            position = follower.position

    async def _mark(self, response_id: str) -> None:
        """The log is followed from here, not where it is written: its writer stops holding
        the stream's events back (writer.py). Joined already, so nothing is missed meanwhile."""
        try:
            await self._store.mark_followed(response_id)
        except ProxyError as exc:
            log.warning("could not mark the log of %s followed: %s", response_id,
                        failure_cause(exc))

    async def _live(self, response_id: str, follower: _Follower,
                    idle: float) -> AsyncIterator[StoredEvent]:
        """A joined follower's events until the terminal one, `idle` seconds of silence, or
        its drop for slowness (the caller then catches it up from the store)."""
        try:
            while True:
                if not follower.items:
                    if follower.dropped or not await follower.wait(idle):
                        return
                    continue
                item = follower.items.popleft()
                if isinstance(item, Exception):
                    raise item
                yield item
                if item.type in t.TERMINAL_EVENTS:
                    follower.dropped = False
                    return
        finally:
            self._leave(response_id, follower)

    @property
    def followed_here(self) -> Container[str]:
        """The responses someone on this instance follows now (a live view): the writer reads
        it when it opens a log (a queued job's client may be following already); a follower
        joining later asks the writer for the log's `recent` events first, which tells it."""
        return self._followers.keys()

    def publish_local(self, response_id: str, event: StoredEvent) -> None:
        """An event this process just made for `response_id` (called per event: one dict
        lookup when nobody here follows that log)."""
        group = self._followers.get(response_id)
        if not group:
            return
        slow: list[_Follower] | None = None
        for follower in group:
            if event.seq == follower.position + 1 and not follower.offer(event):
                slow = [*(slow or ()), follower]  # only on a drop: rare, not per event
        for follower in slow or ():
            self._leave(response_id, follower)

    def publish_local_all(self, response_id: str, events: Sequence[StoredEvent]) -> None:
        """`publish_local` for the events of one batch, in order: one lookup for them all (a
        stored stream's first and last batches hold a dozen events or more each)."""
        if response_id not in self._followers:
            return
        for event in events:
            self.publish_local(response_id, event)

    def _join(self, response_id: str, follower: _Follower) -> None:
        self._followers.setdefault(response_id, set()).add(follower)
        if self._task is None or self._task.done():
            self._task = self._supervisor.start("event-log-follower", self._run)

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
                group = self._followers.get(rid, set())
                for follower in group:
                    for event in events:
                        follower.offer(event)
                # A dropped follower no longer holds the log's tail position back.
                for follower in [f for f in group if f.dropped]:
                    self._leave(rid, follower)

    def _interrupt_all(self, exc: Exception) -> None:
        log.warning("event log tail failed; %d follower(s) interrupted: %s",
                    sum(len(g) for g in self._followers.values()), failure_cause(exc))
        for group in self._followers.values():
            for follower in group:
                follower.put(FollowInterrupted(str(exc)))
        self._followers.clear()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
