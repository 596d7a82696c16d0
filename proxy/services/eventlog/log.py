"""`EventLog`: a response's event log as one thing, whoever writes, reads or ends it.

    open(id) ─▶ LogHandle     the batching writer (writer.py `EventLogHub`)
    follow(id, after)         stored then live, one blocking reader per process (follow.py)
    pages(id, after)/whole    stored events in bounded pages (pages.py)
    end(record, how)          end a response no live turn will finish, from its log (ending.py)

The writer and the followers need each other: the writer hands each event it makes to this
process's followers at once (`publish_local`), and a follower joining a log being written here
catches up from the writer's memory (`recent`). Both are made here, the followers reading the
writer through this object, so neither is patched after construction.

"Ending a response" lives here: it restores the assembler from the log and writes the closing
events with the final object, exactly as a turn's end is written. The worker's reclaim
(services/jobs/runner.py) and the lease sweep (services/eventlog/ownership.py) both call `end`;
neither owns the other's concern. The modules stay apart for now (one concept each); this is the
room's door.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from proxy.core.events.assembler import Assembler
from proxy.core.ids import IdFactory
from proxy.core.types import Event
from proxy.services.eventlog.ending import close_from_log
from proxy.services.eventlog.follow import Followers
from proxy.services.eventlog.pages import log_pages, whole_log
from proxy.services.eventlog.writer import FIRST_WINDOW, EventLogHub, LogHandle
from proxy.services.process.loops import LoopSupervisor
from proxy.store.base import ResponseRecord, Store, StoredEvent
from proxy.telemetry.tracing import Tracing


class EventLog:
    def __init__(self, store: Store, *, ttl: int, event_ttl: int,
                 supervisor: LoopSupervisor | None = None,
                 tracing: Tracing | None = None) -> None:
        """`ttl`: the Response's (`--response-ttl`), `event_ttl`: its log's (`--event-ttl`)."""
        self.store = store
        self.ttl = ttl
        self.event_ttl = event_ttl
        self.followers = Followers(store, supervisor=supervisor, recent=self._recent,
                                   writing=self._writing)
        self.writer = EventLogHub(store, ttl=ttl, event_ttl=event_ttl, first_window=FIRST_WINDOW,
                                  local=self.followers.publish_local,
                                  local_all=self.followers.publish_local_all,
                                  locally_followed=self.followers.followed_here,
                                  supervisor=supervisor,
                                  tracing=tracing)

    def _recent(self, response_id: str) -> list[StoredEvent]:
        return self.writer.recent(response_id)

    def _writing(self, response_id: str) -> bool:
        return self.writer.writing(response_id)

    def open(self, response_id: str, *, early: bool = True) -> LogHandle:
        return self.writer.open(response_id, early=early)

    def follow(self, response_id: str, *, after: int,
               idle: float) -> AsyncIterator[StoredEvent]:
        return self.followers.follow(response_id, after=after, idle=idle)

    def pages(self, response_id: str, *, after: int) -> AsyncIterator[list[StoredEvent]]:
        return log_pages(self.store, response_id, after=after)

    async def whole(self, response_id: str) -> list[StoredEvent]:
        return await whole_log(self.store, response_id)

    async def end(self, record: ResponseRecord, how: Callable[[Assembler], list[Event]], *,
                  ids: IdFactory, clock: Callable[[], float]) -> None:
        """`how` (e.g. `lambda a: a.fail(reason)`) applied to the response restored from its
        log, its closing events and final object stored together."""
        await close_from_log(self.store, self.writer, record, how, ids=ids, clock=clock,
                             response_ttl=self.ttl, event_ttl=self.event_ttl)

    async def aclose(self) -> None:
        """The writer first (its last flush), then the readers."""
        await self.writer.aclose()
        await self.followers.aclose()
