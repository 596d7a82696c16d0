"""Event-log writes, batched off the hot path: one flusher per process for every live stream.

A stream hands each event to its `LogHandle` (a list append, no await). Every `window` seconds,
or sooner when `max_pending` events wait, the hub writes everything pending, for every
stream, in one store call (one Redis pipeline), so the per-token cost on Redis is a fraction of a
command, not a round trip. A stream's end goes through `LogHandle.finish`, which first waits for
its pending events to be written and then stores the final object together with the terminal
event (`Store.finish_response`): the client is sent the terminal event only after that returns.

A failed flush is logged and the events are dropped (the stream to the client goes on; a replay
of that response is then rebuilt from the final object instead). The flusher never dies of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.core.errors import ProxyError
from proxy.core.types import ResponseObject
from proxy.services.tasks import Supervisor
from proxy.store.base import Store, StoredEvent, Transition

log = logging.getLogger("proxy.eventlog")


# Events of one live response kept in memory for this process's own late-joining followers.
# Past it, they read from the store like anyone else.
MAX_RECENT = 20_000


@dataclass(eq=False)
class LogHandle:
    hub: EventLogHub
    response_id: str
    pending: list[StoredEvent] = field(default_factory=list)
    broken: bool = False
    # Every event made through this handle, while the response runs: a follower on this
    # instance that joins late catches up from here, with no await between its catch-up and
    # its joining (so nothing made meanwhile can slip between the two).
    recent: list[StoredEvent] = field(default_factory=list)

    def add(self, event: StoredEvent) -> None:
        if self.broken:
            return
        self.pending.append(event)
        if len(self.recent) < MAX_RECENT:
            self.recent.append(event)
        self.hub.local(self.response_id, event)
        self.hub.wake(len(self.pending))

    async def finish(self, final: ResponseObject, terminal: StoredEvent | None) -> Transition:
        """Flush what is pending, then store the final object and terminal event atomically;
        only then is the terminal event handed to local followers."""
        try:
            await self.hub.flush_now()
            result = await self.hub.store.finish_response(final, terminal, ttl=self.hub.ttl,
                                                          event_ttl=self.hub.event_ttl)
            if terminal is not None and result.changed:
                self.recent.append(terminal)
                self.hub.local(self.response_id, terminal)
            return result
        finally:
            self.hub.release(self)


class EventLogHub:
    def __init__(self, store: Store, *, ttl: int, event_ttl: int, window: float = 0.02,
                 max_pending: int = 512,
                 local: Callable[[str, StoredEvent], None] = lambda _rid, _event: None,
                 supervisor: Supervisor | None = None) -> None:
        self.store = store
        # Hands each event to this process's own followers of the log at once (follow.py).
        self.local = local
        self.ttl = ttl
        self.event_ttl = event_ttl
        self.window = window
        self.max_pending = max_pending
        self._handles: set[LogHandle] = set()
        self._by_id: dict[str, LogHandle] = {}
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()  # one flush at a time keeps per-stream order
        self._task: asyncio.Task[None] | None = None
        self._supervisor = supervisor or Supervisor()

    def open(self, response_id: str) -> LogHandle:
        handle = LogHandle(self, response_id)
        self._handles.add(handle)
        self._by_id[response_id] = handle
        if self._task is None or self._task.done():
            self._task = self._supervisor.start("event-log-flusher", self._run)
        return handle

    def release(self, handle: LogHandle) -> None:
        self._handles.discard(handle)
        if self._by_id.get(handle.response_id) is handle:
            del self._by_id[handle.response_id]

    def recent(self, response_id: str) -> list[StoredEvent]:
        """The events this process made for a response that still runs here (else none)."""
        handle = self._by_id.get(response_id)
        return handle.recent if handle is not None else []

    def wake(self, pending: int) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()
        elif pending >= self.max_pending:
            # a burst (zero-delay upstream): do not let one stream's buffer grow unbounded
            self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(self.window)  # let events gather: one write for many
            self._wakeup.clear()
            await self.flush_now()

    async def flush_now(self) -> None:
        async with self._lock:
            batches: dict[str, list[StoredEvent]] = {}
            for handle in self._handles:
                if handle.pending:
                    batches[handle.response_id] = handle.pending
                    handle.pending = []
            if not batches:
                return
            try:
                await self.store.append_events(batches, ttl=self.event_ttl)
            except ProxyError as exc:
                log.error("event log write failed for %d stream(s): %s", len(batches), exc)
                for handle in self._handles:
                    if handle.response_id in batches:
                        handle.broken = True

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush_now()
