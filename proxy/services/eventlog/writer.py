"""Event-log writes, batched off the hot path: one flusher per process for every live stream.

A stream hands each event to its `LogHandle` (a list append, no await: the (type, JSON) pair
the turn encoded for its client, numbered only when a write takes it, as an `EventRun`). The
flusher writes everything pending, for every stream, in one store call (one Redis pipeline),
every `window` seconds while events are pending (so no token has to wake it: a flush that
finds none lets it sleep until the next event, `EventLogHub._sleep`), or at once when a stream
has `max_pending` events waiting (a zero-delay upstream must not wait out the window with a
growing buffer). So the per-token cost on Redis is a fraction of a command, not a round trip,
and in the proxy a list append and two checks (`LogHandle.record`).

The window is longer than a token's interval on purpose (`WINDOW`, 100 ms): each flush then
carries a run of each stream's events, which the store keeps as one log entry (one XADD, one
parse; store/lua/packing.py), where a 20 ms window wrote each token of a 20 ms/token stream as a
flush of its own. Nobody on this instance waits for it: its own followers get each event the
moment it is made (`local`), and a stream's end carries its pending events in the final write.
What it delays is a follower on another instance, by up to the window; and, so that such a
follower (a background job's client served elsewhere, a replay) sees a response start as soon
as before, a stream's first events are written on their own after `first_window` (20 ms, the
old window), ahead of the others. Not a foreground stream's (`open(early=False)`): its start
(`response.created`, `response.in_progress`) carries the create-time object the record holds,
and a reader elsewhere makes those two events from the record while the log is still empty
(services/responses/stored.py `_head`, ending.py), so its start waits, however long, for the
stream's next events (its first token), and is then held with them as any others: one Redis
call fewer a stored stream, none between its create and its first token (against an upstream
whose first token takes over 20 ms, the start's own flush came before it), and an answer that
ends within the hold writes its start by reference to the record's object
(store/lua/references.py) instead of inline.

A stream nobody on another instance follows live has no reader waiting for its log until it
ends, so its events are held back for up to `HOLD_WINDOWS` windows (1 s), or until they fill
a log entry (store/lua/packing.py `MAX_EVENTS_PER_ENTRY`): a 20 ms/token stream's entry then
carries ~40 events, not ~5, and Redis's per-entry work (four commands in the flush script, and
the script's own steps around them) and the flush's per-stream work here are paid an eighth as
often. How the writer knows: a follower on another instance marks the response when it joins the
live tail (`Store.mark_followed`, services/eventlog/follow.py), and the flush script reports the
marked streams among those it writes; from that reply on, the stream's events go every window as
before. So such a follower waits up to the held windows once, for the flush that tells the
writer, then up to one window as before; the first events of a stream opened early
(`first_window`) and the followers on this instance (`local`) are never held. Only the timed
flush holds: a full buffer, an end waiting on the flusher (`flush_through`) and `aclose` write
everything. What the hold costs otherwise: a writer that dies loses up to 1 s of events instead
of 100 ms (its response is then ended from what its log holds: ending.py); its client, whose
connection died with it, had them.

A stream's end goes through `LogHandle.finish`, which stores the final object together with
the terminal event (`Store.finish_response`, retried and reconciled by
services/eventlog/durable.py): the client is sent the terminal event only after that returns.
The stream's events still pending then ride in that same write (one round trip for the end of a
short answer, not a flush and then the final write), provided no flush carrying its earlier
events is still in flight: the end waits for that one (it must land first, or the log would be
out of order), or, for a backlog too big for one call, flushes it through the shared flusher
first (`EventLogHub.flush_through`).

A failed flush keeps its events and is tried again (after a growing delay, at most
`MAX_FLUSH_ATTEMPTS` times in a row per stream); past that, or past `MAX_UNFLUSHED` waiting
events, the stream's log is given up (the stream to the client goes on) and a replay of it finds
the gap and is rebuilt from the final object (services/responses/stored.py). The flusher never dies
of it.

`LogHandle.recent` is only the events not yet confirmed in the store (those of the write in
flight, `flying`, then `pending`): a follower on this instance that joins late reads the store,
then catches up from here. Once a flush (or the final write that carried them) lands, its
events leave it (a follower finds them in the store), so memory is bounded by what is
unflushed, whether or not anyone follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import time
from collections.abc import Callable, Collection, Container, Iterable, Sequence
from dataclasses import dataclass, field

from proxy.core.errors import ProxyError, StoreUnavailable, failure_cause
from proxy.core.types import Event, EventBatch, ResponseObject
from proxy.services.eventlog.durable import RETRY_DELAYS, retried, store_final
from proxy.services.process.loops import LoopSupervisor
from proxy.store.base import EventRow, EventRun, RunColumns, Store, StoredEvent, Transition
from proxy.store.lua.packing import MAX_EVENTS_PER_ENTRY, first_entry, run_columns
from proxy.telemetry.tracing import SLOW_FLUSH_NS, Tracing

log = logging.getLogger("proxy.eventlog")


# Events of one stream waiting to be written (the store down or slow) before its log is given
# up: memory stays bounded; a replay then rebuilds from the final object.
MAX_UNFLUSHED = 20_000
# Consecutive failed flushes of one stream's events before its log is given up.
MAX_FLUSH_ATTEMPTS = len(RETRY_DELAYS) + 1
# Pending events a stream's final write carries at most. Redis runs a script to its end before
# anything else, so a bigger backlog goes through the flusher (which splits it into calls of
# store/redis.py's MAX_EVENTS_PER_CALL) before the final write.
MAX_CARRIED = 256
# How long a batch gathers (see the module's docstring), and how soon a stream's first events
# are written ahead of it (what the whole window was before runs of events shared an entry).
WINDOW = 0.1
FIRST_WINDOW = 0.02
# Windows a started stream nobody on another instance follows keeps its events at most (see
# the module's docstring): a 20 ms/token stream's entries then hold ~40 events, not ~5, and its
# flushes run ~100 commands inside Redis per 1,000 tokens instead of 800
# (tests/integration/test_store_redis_work.py). Ten: the rule in `_take` stops holding when one
# more window's worth would overflow an entry (at five events a window, after eight), and the
# spare windows let tokens that come in bursts (a busy loop or upstream) still fill one.
HOLD_WINDOWS = 10
# The most events a stream held `held` windows may have for a timed flush to hold it one more
# (`_take`'s rule: one more window's worth, at the rate so far, still fits in one entry; none
# past `HOLD_WINDOWS`): looked up per held stream and window, not worked out.
KEEP = tuple(MAX_EVENTS_PER_ENTRY * (held + 1) // (held + 2) if held < HOLD_WINDOWS - 1 else 0
             for held in range(HOLD_WINDOWS))


@dataclass(eq=False)
class LogHandle:
    hub: EventLogHub
    response_id: str
    # The events waiting for a write, as the turn encoded them (type, JSON), numbered from
    # `first` on: a token adds its pair to this list as it comes (no tuple made, no number
    # read), and a write numbers them (`_numbered`) when it takes them. `first` is the number
    # the next event taken gets (-1: none recorded yet); `last`, the batch `record` was last
    # given, checks it then (`_checked`): numbers only grow by one within a stream, so its last
    # event's number must be `first` plus the pairs before it.
    rows: list[tuple[str, bytes]] = field(default_factory=list)
    first: int = -1
    last: Sequence[Event] = ()
    broken: bool = False
    failures: int = 0  # flushes of this stream's events that failed in a row
    # The events the write now in flight carries (a flush's or the final write's; empty: none),
    # all before `rows`. With `rows`, the events not yet confirmed in the store, in order
    # (`recent`): a follower on this instance that joins late catches up from them. The write
    # keeps what it carries rather than every event going to a second list as it is made.
    flying: Sequence[EventRow] = ()
    # Resolved when the flush now writing some of this stream's events is over (None: no flush
    # holds any): the end must not overtake it (`finish`).
    in_flight: asyncio.Future[bool] | None = None
    # `rows` at which a flush is wanted now (the hub's `max_pending`, or `MAX_UNFLUSHED`).
    limit: int = MAX_UNFLUSHED + 1
    # A token needs more than its append (`_attend`): the stream has not started, someone on
    # this instance follows it, its log was given up, no number is known yet, or the flusher
    # sleeps (`EventLogHub._sleep`). One flag, kept where those change, so the common token
    # reads one attribute and `len(rows)`.
    attend: bool = True
    # A follower on this instance was there when the log was opened, or joined since
    # (`EventLogHub.recent`): each event goes to it as it is made (`hub.local`). It stays set:
    # once nobody follows, that is one dict lookup.
    watched: bool = False
    # A flush has taken some of its events: its next ones wait for the whole window.
    started: bool = False
    # Someone on another instance follows the log live (the flush script said so): its events
    # are not held back past one window (`HOLD_WINDOWS`).
    followed: bool = False
    held: int = 0  # timed flushes that left this stream's pending events for a later one
    # The most pending events the next timed flush holds back (`KEEP[held]`; 0: none, or
    # not known yet: `_take` works it out).
    keep: int = 0
    # Opened late (`EventLogHub.open(early=False)`): its start, events 0 and 1, is what readers
    # elsewhere make from the record while the log is empty, so alone it waits for more.
    start_in_record: bool = False

    def record(self, events: list[Event], encoded: EventBatch) -> None:
        """A turn's batch of events (`encoded`: their types and JSON, in order; never empty: the
        batch's last number checks the count), as the turn hands it on
        (services/generation/run.py, once a token). Nearly always an append and
        two checks: the flusher wakes by itself every window while a stream is open, and the
        numbers are put on at the write."""
        rows = self.rows
        rows += encoded
        self.last = events
        if self.attend or len(rows) >= self.limit:
            self._attend(events, encoded)

    def _attend(self, events: Sequence[Event], encoded: EventBatch) -> None:
        """What `record` leaves to a batch only some streams' tokens need: the numbering's
        start, the local followers, a full buffer, a first window."""
        if self.broken:
            self.rows = []
            return
        if self.first < 0 and events:  # the first batch: `rows` held nothing before it
            self.first = events[0]["sequence_number"]
        hub = self.hub
        if self.watched and events:
            hub.local_all(self.response_id, list(map(StoredEvent._make,
                                                     _stored(events, encoded))))
        self._added(hub)

    def _added(self, hub: EventLogHub) -> None:
        hub.wake()  # (it may sleep: `EventLogHub._sleep`)
        pending = len(self.rows)
        if pending > MAX_UNFLUSHED:
            self.give_up()
            return
        if pending >= self.limit:
            hub.flush_soon()  # a burst (zero-delay upstream): flush now, not at the window's end
        if not self.started:
            hub.hurry(self)
        self.attend = not self.started or self.watched or self.first < 0

    def add(self, event: EventRow) -> None:
        """One event, numbered already."""
        self.add_all((event,))

    def add_all(self, events: Sequence[EventRow], *, wake: bool = True) -> None:
        """Events numbered already (each the one after the one before), in order: handed to
        local followers, then as `record` (`wake` False: no flush asked for, for events a
        write about to start carries: `finish`)."""
        if self.broken or not events:
            return
        if not self._continued(events[0][0], len(events), events[-1][0]):
            return
        self.rows += [row[1:] for row in events]
        self.last = ()  # checked here: `_checked` has nothing more to check
        hub = self.hub
        if self.watched:
            hub.local_all(self.response_id, list(map(StoredEvent._make, events)))
        if wake:
            self._added(hub)
        elif len(self.rows) > MAX_UNFLUSHED:
            self.give_up()

    def _carry(self, events: Sequence[Event], encoded: EventBatch) -> None:
        """The turn's last batch before its terminal event, for the final write to carry: its
        pairs added as `record` adds them (not numbered into rows and taken apart again, as
        `add_all` would), checked by the batch's own numbers, with no flush asked for."""
        if not self._continued(events[0]["sequence_number"], len(encoded),
                               events[-1]["sequence_number"]):
            return
        self.rows += encoded
        self.last = ()  # checked here: `_checked` has nothing more to check
        if self.watched:
            self.hub.local_all(self.response_id,
                               list(map(StoredEvent._make, _stored(events, encoded))))
        if len(self.rows) > MAX_UNFLUSHED:
            self.give_up()

    def _continued(self, seq: int, count: int, last: int) -> bool:
        """Whether `count` events numbered `seq` to `last` follow the pending ones; if not, the
        log is given up (a replay is rebuilt from the final object) rather than numbered
        wrong."""
        if self.first < 0:
            self.first = seq
        if seq == self.first + len(self.rows) and last == seq + count - 1:
            return True
        return self._misnumbered(f"events {seq}-{last}")

    def _checked(self) -> bool:
        """Whether `rows`, numbered from `first`, end where the last batch `record` was given
        ends (else the log is given up, as in `_continued`)."""
        last = self.last
        if not last or self.broken:
            return not self.broken
        seq = last[-1]["sequence_number"]
        return seq == self.first + len(self.rows) - 1 or self._misnumbered(f"event {seq} last")

    def _misnumbered(self, what: str) -> bool:
        log.error("event log of %s given up: %s after %d pending from %d", self.response_id,
                  what, len(self.rows), self.first)
        self.give_up()
        return False

    def take(self, count: int, columns: RunColumns | None = None) -> EventRun:
        """The first `count` pending events out of `rows` (the caller writes them); `columns`:
        theirs, if made already."""
        rows, first = self.rows, self.first
        if count >= len(rows):
            self.rows = []
        else:
            rows, self.rows = rows[:count], rows[count:]
        self.first = first + len(rows)
        return EventRun(first, rows, columns)

    def put_back(self, events: EventRun) -> None:
        """A failed write's events, in front of those that came meanwhile."""
        if events:
            self.rows[:0] = events.rows
            self.first = events.first

    @property
    def pending(self) -> list[StoredEvent]:
        """The events waiting for a write, numbered."""
        return list(map(StoredEvent._make, EventRun(self.first, self.rows)))

    @property
    def recent(self) -> list[StoredEvent]:
        """The events not yet confirmed in the store, in order: a follower on this instance
        that joins late catches up from here, with no await between its catch-up and its
        joining (so nothing made meanwhile can slip between the two)."""
        return list(map(StoredEvent._make, (*self.flying, *EventRun(self.first, self.rows))))

    def give_up(self) -> None:
        """Stop logging this stream (its replay is rebuilt from the final object)."""
        self.broken = True
        self.attend = True
        self.rows = []
        self.flying = []

    async def finish(self, final: ResponseObject, terminal: StoredEvent | None, *,
                     tenant: str, events: Sequence[Event] = (),
                     encoded: EventBatch | None = None) -> Transition:
        """Store the final object with the pending events and the terminal event atomically
        (retried, reconciled); only then is the terminal event handed to local followers.
        `tenant`: the response's owner. `events` (with `encoded`, as `record` takes them): the
        turn's last ones before the terminal, pending from here (handed to local followers at
        once), with no flusher asked for them: this write carries them."""
        if events and encoded is not None and not self.broken:
            self._carry(events, encoded)
        try:
            self._checked()  # numbered wrong: given up, nothing carried
            if self.in_flight is None and len(self.rows) <= MAX_CARRIED:
                # Nearly always (no flush holds its events): taken here, without the coroutine
                # of `_take_for_final` (whose wait this needs not).
                carried: EventRun | None = self.take(len(self.rows))
            else:
                carried = await self._take_for_final()
            if carried is None:  # a backlog, or a flush that never ends: the flusher writes it
                try:
                    await retried(f"event log flush of {self.response_id}",
                                  lambda: self.hub.flush_through(self))
                except ProxyError as exc:
                    log.error("event log of %s left incomplete: %s", self.response_id,
                              failure_cause(exc))
                carried = EventRun(self.first, [])
            self.flying = carried  # a late follower here catches up from them meanwhile
            result = await store_final(self.hub.store, final, terminal, tenant=tenant,
                                       ttl=self.hub.ttl, event_ttl=self.hub.event_ttl,
                                       events=carried)
            if result.changed:
                self.failures, self.flying = 0, []  # in the store: out of `recent`
                # (Not kept for a follower joining later: the handle is released below, with
                # no await between, and such a follower finds it in the store.)
                if terminal is not None:
                    self.hub.local(self.response_id, terminal)
            elif carried:
                await self._append_refused(carried)
            return result
        finally:
            self.hub.release(self)

    async def _take_for_final(self) -> EventRun | None:
        """The pending events, taken for the final write once no flush holding earlier events
        of this stream is in flight (waited for: the flush's own future, no lock); None when
        they must go through the flusher instead (too many, or flushes keep taking them)."""
        for _ in range(MAX_FLUSH_ATTEMPTS + 1):  # each wait is one flush: bounded
            flight = self.in_flight
            if flight is None:
                break
            await asyncio.shield(flight)
        if self.in_flight is not None or len(self.rows) > MAX_CARRIED:
            return None
        # Taken with no await since the check: no flush can start in between (one thread), and
        # with none in flight for this stream, `rows` holds every event not yet stored.
        return self.take(len(self.rows))

    async def _append_refused(self, events: EventRun) -> None:
        """A refused final write (e.g. a late completion after a cancel) appended nothing: the
        events go to the log as a flush would have taken them (dropped if the log is closed)."""
        try:
            await retried(f"event log flush of {self.response_id}",
                          lambda: self.hub.store.append_events({self.response_id: events},
                                                               ttl=self.hub.event_ttl),
                          reconnect=self.hub.store.reconnect)
            self.failures, self.flying = 0, []
        except ProxyError as exc:
            log.error("event log of %s left incomplete: %s", self.response_id,
                      failure_cause(exc))


def _stored(events: Sequence[Event], encoded: EventBatch) -> list[EventRow]:
    """A turn's events as the log holds them (`encoded`: their types and JSON, in order)."""
    # `(seq,) + (kind, data)` by C loops: no Python step per event (a stored stream's first
    # batch holds its start, its first item and part, and its first delta).
    if len(events) != len(encoded):
        raise ValueError("events and their encoding differ in length")
    return list(map(tuple.__add__, zip(map(_SEQUENCE_NUMBER, events)), encoded))


_SEQUENCE_NUMBER = operator.itemgetter("sequence_number")


def _each(local: Callable[[str, StoredEvent], None], response_id: str,
          events: Sequence[StoredEvent]) -> None:
    for event in events:
        local(response_id, event)


class EventLogHub:
    def __init__(self, store: Store, *, ttl: int, event_ttl: int, window: float = WINDOW,
                 first_window: float | None = None, max_pending: int = 512,
                 local: Callable[[str, StoredEvent], None] = lambda _rid, _event: None,
                 local_all: Callable[[str, Sequence[StoredEvent]], None] | None = None,
                 locally_followed: Container[str] | None = None,
                 supervisor: LoopSupervisor | None = None,
                 tracing: Tracing | None = None) -> None:
        """`first_window`: how soon a stream's first events are written ahead of the batch
        (None: they wait for `window` like the others). `local_all`: `local` for the events of
        one batch at once (default: `local` for each). `locally_followed`: the responses `local`
        has followers of (a live view, read when a log is opened here; a follower joining later
        asks for the log's `recent` events first); None: `local` is given every event."""
        if window <= 0:  # the flusher would never yield to the loop
            raise ValueError(f"the event log's window must be above 0, got {window}")
        self.store = store
        # A span per slow or failed flush, in a trace of its own (proxy/telemetry/tracing.py
        # `slow_flush`); None: off.
        self.tracing = tracing
        # Hands each event to this process's own followers of the log at once (follow.py).
        self.local = local
        self.local_all = local_all or functools.partial(_each, local)
        self.locally_followed = locally_followed
        self.ttl, self.event_ttl = ttl, event_ttl  # the Response's, its log's
        # Flush every `window` seconds, or at once when a log holds `max_pending` events.
        self.window, self.max_pending = window, max_pending
        self.first_window = first_window
        self._handles: set[LogHandle] = set()
        self._by_id: dict[str, LogHandle] = {}
        # Set while a stream is open or a flush is wanted: the flusher runs a window at a time.
        self._wakeup = asyncio.Event()
        self._full = False  # a stream reached `max_pending`, or an end waits: flush now
        self._quiet = False  # the last flush of every stream found none with events pending
        self._fresh: set[LogHandle] = set()  # streams whose first events wait (`first_window`)
        self._nudge = asyncio.Event()  # `_full` or `_fresh` changed: the gathering looks again
        # The flusher naps until its window's end and would write a new stream's first events
        # only then: `hurry` nudges it (the only reader of `_watching`).
        self._watching = False
        self._lock = asyncio.Lock()  # one flush at a time keeps per-stream order
        self._task: asyncio.Task[None] | None = None
        # Resolved (True: written) by the next flush to start: what finishing streams wait on
        # (`flush_through`). One future for all of them, so they all resume in one step.
        self._next_round: asyncio.Future[bool] | None = None
        self._supervisor = supervisor or LoopSupervisor()
        self._suspect = False  # the last write failed: reconnect before the next one

    def open(self, response_id: str, *, early: bool = True) -> LogHandle:
        """The log of `response_id`, written from here. `early` False: its first events are not
        written ahead of the batch (`first_window`); the start alone (events 0 and 1) waits for
        the stream's next events, then all are held as a started stream's (a foreground
        stream's start, which readers elsewhere make from the record meanwhile:
        services/responses/stored.py)."""
        followed = self.locally_followed  # (a follower may be waiting: a queued job's client)
        handle = LogHandle(self, response_id, started=not early, start_in_record=not early,
                           limit=min(self.max_pending, MAX_UNFLUSHED + 1),
                           watched=followed is None or response_id in followed)
        self._handles.add(handle)
        self._by_id[response_id] = handle
        if self._task is None or self._task.done():
            self._task = self._supervisor.start("event-log-flusher", self._run)
        if not self._wakeup.is_set():  # the flusher runs every window while a stream is open
            self._wakeup.set()
        return handle

    def release(self, handle: LogHandle) -> None:
        self._handles.discard(handle)
        self._fresh.discard(handle)
        if self._by_id.get(handle.response_id) is handle:
            del self._by_id[handle.response_id]

    def recent(self, response_id: str) -> list[StoredEvent]:
        """The events this process made for a response that still runs here and not yet in
        the store (else none), for a follower about to join here: from now on that log's
        events go to `local` as they are made."""
        handle = self._by_id.get(response_id)
        if handle is None:
            return []
        handle.watched = handle.attend = True
        return handle.recent

    def writing(self, response_id: str) -> bool:
        """Whether this process writes that response's log now."""
        return response_id in self._by_id

    def hurry(self, handle: LogHandle) -> None:
        """`handle`'s first events wait: written after `first_window`, ahead of the batch."""
        fresh = self._fresh
        if self.first_window is not None and handle not in fresh:
            # Only a flusher napping out its whole window with no new stream waiting is woken
            # (`_watching`): one already napping for a first window writes every stream then
            # waiting at its end, and one starting a window looks at `_fresh` then. A
            # nudge per new stream woke it once per stored request (~7 µs of proxy CPU per
            # stored short answer at 32 clients, in `_nap`); and a nudge whenever no stream
            # was waiting (the earlier ones had ended within their first window, a short
            # answer's usual case) still woke a flusher napping for a first window already,
            # to nap again: ~45 Python calls per stored short answer one after another
            # (tests/integration/test_request_cost.py `MAX_CALLS_ON_REDIS`).
            if self._watching and not fresh:
                self._nudge.set()
            fresh.add(handle)

    def wake(self) -> None:
        """Events are pending: the flusher runs a window at a time again."""
        if not self._wakeup.is_set():
            self._wakeup.set()

    def _sleep(self) -> None:
        """No stream has events pending (none open, a long prefill, a handle never finished):
        the flusher waits for the next event or stream rather than run every window, and
        each open stream's next event takes `record`'s slower path, which wakes it. (Set on
        the flush that found nothing, with no await since: no event came in between.)"""
        self._wakeup.clear()
        for handle in self._handles:
            handle.attend = True

    def flush_soon(self) -> None:
        """A flush now, without waiting out the window."""
        if not self._full:
            self._full = True
            self._nudge.set()
        if not self._wakeup.is_set():
            self._wakeup.set()

    async def _run(self) -> None:
        failed = 0
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            # let events gather: one write for many (cut short by a full buffer)
            await self._gather(loop.time() + self.window)
            timed, self._full = not self._full, False
            if await self._flush(hold=timed):
                failed = 0
                if self._quiet and not self._full and not self._fresh:
                    self._sleep()
                continue
            # Kept for the next attempt, after a growing delay (the store may be failing over).
            await asyncio.sleep(RETRY_DELAYS[min(failed, len(RETRY_DELAYS) - 1)])
            failed += 1
            self._wakeup.set()

    async def _gather(self, due: float) -> None:
        """Until `due` on the loop's clock, or until a flush is wanted now; meanwhile, the
        first events of new streams are written on their own, `first_window` after they
        came (a bounded loop: each round sleeps or writes)."""
        loop = asyncio.get_running_loop()
        first = self.first_window or 0.0
        while not self._full:
            left = due - loop.time()
            if left <= 0:
                return
            if self._fresh and left > first:
                await self._nap(first, fresh=False)
                if not self._full:
                    await self._flush_fresh()
            else:
                # with new streams already waiting, the batch comes within `first_window`
                await self._nap(left, fresh=not self._fresh)

    async def _nap(self, seconds: float, *, fresh: bool) -> None:
        """Sleep `seconds`, cut short by a flush wanted now (or, `fresh`, by a new stream's
        first events)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        nudge = self._nudge
        while not self._full:  # each round waits for the timer or a nudge: bounded by `until`
            left = until - loop.time()
            nudge.clear()
            if left <= 0 or (fresh and self._fresh):
                return
            self._watching = fresh
            # A timer that nudges, not `asyncio.timeout`: most naps end by their time, and the
            # timeout's way out is a cancellation turned into a TimeoutError, exceptions made
            # and unwound through the wait once or twice per stored answer's first window.
            timer = loop.call_later(left, nudge.set)
            try:
                await nudge.wait()
            finally:
                timer.cancel()
                self._watching = False

    async def _flush_fresh(self) -> None:
        """The new streams' first events, alone; a failure leaves them to the batch's flush."""
        async with self._lock:
            fresh = [handle for handle in self._fresh if handle.rows]
            self._fresh.clear()
            if fresh:
                await self._write_pending(fresh)

    async def flush_through(self, handle: LogHandle) -> None:
        """Return once every event given to `handle` is in the store (or its log was given
        up); raise `StoreUnavailable` if the write failed.

        Streams that finish together share flushes (a group commit): each asks the flusher for
        a flush now and waits on one future that the next flush to start resolves; every
        flush writes every stream's pending events. Why not each take the flush lock in turn:
        256 streams ending together then made 256 flushes one after another; and even when
        most found their events already written, the lock is handed from waiter to waiter one
        event-loop step at a time, and on a busy loop (one step = every stream's chunk of that
        moment) that chain took seconds, with the timed flusher queued behind it: the per-token
        profile's probe saw flushes ~8 s apart, each carrying 20-48k events."""
        while (handle.rows or handle.flying) and not handle.broken:
            if self._task is None or self._task.done():  # no flusher (closing): flush here
                async with self._lock:
                    if (handle.rows or handle.flying) and not handle.broken \
                            and not await self._flush_locked():
                        raise StoreUnavailable("the event log could not be written")
                return
            round_ = self._next_round
            if round_ is None:
                round_ = self._next_round = asyncio.get_running_loop().create_future()
            self.flush_soon()  # the flusher starts at once, without its window
            if not await asyncio.shield(round_) and (handle.rows or handle.flying) \
                    and not handle.broken:
                raise StoreUnavailable("the event log could not be written")

    async def flush_now(self) -> bool:
        """Write every stream's pending events; False if the write failed (the events are kept
        for the next attempt, up to `MAX_FLUSH_ATTEMPTS` in a row per stream)."""
        return await self._flush(hold=False)

    async def flush_window(self) -> bool:
        """The flush at a window's end: `flush_now`, but a started stream nobody on another
        instance follows keeps its events for a later window while they fit in one log entry,
        up to `HOLD_WINDOWS` windows (the module's docstring says why)."""
        return await self._flush(hold=True)

    async def _flush(self, *, hold: bool) -> bool:
        async with self._lock:
            return await self._flush_locked(hold=hold)

    async def _flush_locked(self, *, hold: bool = False) -> bool:
        """`flush_now`'s work; the caller holds `_lock` (one flush at a time keeps order)."""
        round_, self._next_round = self._next_round, None  # what waits on this flush
        written = False
        try:
            written = await self._write_pending(hold=hold)
            return written
        finally:  # its waiters learn the outcome, also when the write raised (False)
            if round_ is not None and not round_.done():
                round_.set_result(written)

    async def _append(self, logs: dict[str, EventRun]) -> Collection[str]:
        """One flush's write (its reply: the streams followed from another instance). After a
        failed one: on fresh connections, and only if the store answers its probe (durable.py's
        `retried` says why), so a stuck primary costs the attempt a second, not another socket
        timeout."""
        tracing = self.tracing
        started = time.time_ns() if tracing is not None else 0
        try:
            if self._suspect:
                await self.store.reconnect()
            followed = await self.store.append_events(logs, ttl=self.event_ttl)
        except ProxyError as exc:
            self._suspect = True
            if tracing is not None:
                tracing.slow_flush(started, len(logs), sum(map(len, logs.values())), exc)
            raise
        self._suspect = False
        if tracing is not None and time.time_ns() - started >= SLOW_FLUSH_NS:
            tracing.slow_flush(started, len(logs), sum(map(len, logs.values())))
        return followed or ()

    async def _write_pending(self, handles: Iterable[LogHandle] | None = None, *,
                             hold: bool = False) -> bool:
        """Write the pending events of `handles` (all streams when None; `hold`: as
        `flush_window`); the caller holds `_lock`."""
        taken = self._take(self._handles if handles is None else handles, hold=hold)
        if not taken:
            return True
        flight = asyncio.get_running_loop().create_future()
        for handle, events in taken.items():
            handle.in_flight = flight
            handle.flying = events  # in `recent` until it lands
        written = False
        try:
            followed = await self._append({h.response_id: events
                                           for h, events in taken.items()})
            written = True
            for response_id in followed:  # from now on written every window
                known = self._by_id.get(response_id)
                if known is not None:
                    known.followed = True
                    known.keep = 0
        except ProxyError as exc:
            log.error("event log write failed for %d stream(s): %s", len(taken),
                      failure_cause(exc))
            for handle, events in taken.items():
                handle.failures += 1
                handle.flying = []
                if handle.failures >= MAX_FLUSH_ATTEMPTS:
                    handle.give_up()
                elif not handle.broken:
                    handle.put_back(events)
            return False
        finally:
            # Settled before any finisher waiting on it runs again: its events are then either
            # stored (out of `recent`) or back in `pending`, in front.
            for handle in taken:
                if written:  # its events are in the store: out of `recent`
                    handle.failures = 0
                    handle.flying = []
                handle.in_flight = None
            flight.set_result(written)
        return True

    def _take(self, handles: Iterable[LogHandle], *,
              hold: bool = False) -> dict[LogHandle, EventRun]:
        """The pending events of `handles`, numbered and taken for a flush (their streams now
        started); `hold`: those of a started, unfollowed stream stay while one more window's
        worth (at the rate they came) still fits in one log entry, for at most `HOLD_WINDOWS`
        windows."""
        taken: dict[LogHandle, EventRun] = {}
        quiet = True  # no stream has events pending, taken or held
        for handle in handles:
            rows = handle.rows
            if not rows:
                continue
            quiet = False
            count = len(rows)
            if hold and count <= handle.keep:  # held one more window: each token's usual visit
                held = handle.held = handle.held + 1
                handle.keep = KEEP[held]
                continue
            if hold and handle.start_in_record and handle.first + count <= 2:
                # The start alone (no token yet: a long prefill, a tool loop's first steps) of
                # a log opened late: readers elsewhere make it from the record (stored.py
                # `_head`, ending.py), so it waits for the stream's next events, however long.
                continue
            columns: RunColumns | None = None
            holding = hold and handle.started and not handle.followed
            if holding:
                held = handle.held
                if count <= KEEP[held]:
                    handle.held = held + 1
                    handle.keep = KEEP[held + 1]
                    continue
                # Held to here, it goes as one log entry. What overflows that entry (its byte
                # bound: ~45 text deltas of ~188 bytes pass it; or a window that brought more
                # than the rate so far), if at most half as many events, waits for the next
                # one (held as if one window old: no event waits past `HOLD_WINDOWS`) rather
                # than go to Redis as an entry of its own. A stream never held (its rate is
                # over half an entry a window) goes whole, as does any bigger backlog (events
                # too big for the count to fill an entry), as before.
                columns = run_columns(rows)  # made once: the write's packing reads them
                length, size = first_entry(columns)
                if held and length < count and (count - length) * 2 <= length:
                    if handle._checked():
                        kinds, datas, _size = columns
                        taken[handle] = handle.take(length,
                                                    (kinds[:length], datas[:length], size))
                        handle.held, handle.keep = 1, KEEP[1]
                    continue
            if not handle._checked():  # numbered wrong: given up
                continue
            taken[handle] = handle.take(count, columns)
            if not handle.started:
                handle.started = True
                handle.attend = handle.watched
                self._fresh.discard(handle)
            handle.held = 0
            # A stream that may be held (started, nobody elsewhere follows it) is, from the
            # next timed flush on, while its events fit (`keep`).
            handle.keep = KEEP[0] if not handle.followed else 0
        if handles is self._handles:  # (every stream looked at: `_run` may let the flusher sleep)
            self._quiet = quiet
        return taken

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush_now()
