"""Foreground ownership: a stored foreground response whose instance dies ends `failed`.

A background job has the job queue to notice its worker's death (store/jobqueue.py); a foreground
response has only the instance serving it. So that instance holds a lease on each of its
stored foreground responses while it generates them (store/leases.py: one sorted set of
deadlines on the Redis clock):
- taken by the create that stores the response (`Store.create_response(lease_ms=...)`: the
  same script, so no round trip of its own, and a create that fails leaves no lease; never
  per token), renewed for all of this process's live responses in ONE call every third of
  `--lease-ttl`, dropped with the next renewal once the turn has ended (its end is already
  stored by then);
- a lease whose deadline passed is a writer that stopped renewing (kill -9, a lost host).
  Whoever notices closes the response, exactly as a dead worker's job is closed: the log read
  back (`Assembler.restore`), the open items closed, `response.failed` ("the instance serving
  this response stopped") stored with the final object through the compare-and-set. One
  `SET NX` claim makes one reaper do it; its expiry lets another retry if that one dies too;
- who notices: every instance sweeps the expired leases every half lease period (one call,
  a bounded page, no SCAN), so a follower tailing the log anywhere receives the terminal event
  within `lease_ttl` + half of it; a GET or a replay of an `in_progress` foreground response
  also checks its lease and closes it on the spot.
- a writer that finds one of its own leases expired (its event loop stalled, Redis was out
  longer than a lease) stops that turn (`response.failed` to its own client) rather than go on
  writing behind a reaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType

from proxy.core import types as t
from proxy.core.errors import ProxyError, failure_cause
from proxy.core.ids import IdFactory, new_id
from proxy.services.eventlog.log import EventLog
from proxy.store.base import ResponseRecord
from proxy.store.leases import LeaseState, LeaseTable

log = logging.getLogger("proxy.lease")

LOST = "the instance serving this response stopped before it finished"
# What a writer tells its own client when it finds its lease gone (it was presumed dead).
LEASE_LOST = "this response's lease expired (the instance stalled); it was closed elsewhere"
# Expired leases closed per sweep at most (the next sweep takes the rest).
SWEEP_LIMIT = 100


class Leases:
    def __init__(self, table: LeaseTable, event_log: EventLog, *, ttl: float, owner: str,
                 interrupt: Callable[[str, str], object] = lambda _rid, _reason: None,
                 clock: Callable[[], float] = time.time, ids: IdFactory = new_id) -> None:
        self._table = table
        self._store = event_log.store
        self._event_log = event_log
        self._ttl_ms = int(ttl * 1000)
        self._ttl = ttl
        self._owner = owner
        self._interrupt = interrupt  # stops this process's turn of a response (drain.py)
        self._clock, self._ids = clock, ids
        self._held: set[str] = set()
        self._dropped: set[str] = set()

    # -- the writer's side -------------------------------------------------------------------
    @property
    def ttl_ms(self) -> int:
        """A lease's length: what a create taking the lease passes as `lease_ms`."""
        return self._ttl_ms

    def held(self, response_id: str, end_stored: Callable[[], bool] = lambda: True, *,
             taken: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the lease of `response_id` while the body runs. `taken`: the create already
        took it (`ttl_ms` ago at most), so it is only registered here for renewal, with no
        round trip. Otherwise it is taken now, which may fail (the store is down): the
        response is then served unleased, as before leases existed.

        When the body is over but `end_stored()` says its end never reached the store (the
        final write failed past its retries: Redis out for longer than they last), the lease
        is not dropped but left to expire: the stored object is still `in_progress`, and the
        sweep of whichever instance sees the expired lease first closes it from its log, as it
        would a dead writer's. So a writer never leaves its own response `in_progress`."""
        return _Held(self, response_id, end_stored, taken)

    def _register(self, response_id: str) -> None:
        """A lease the create took: renewed from now on."""
        self._held.add(response_id)

    async def _take(self, response_id: str) -> None:
        try:
            await self._table.renew(ttl_ms=self._ttl_ms, new=[response_id])
            self._held.add(response_id)
        except ProxyError as exc:
            log.warning("no lease for %s: %s", response_id, failure_cause(exc))

    def _let_go(self, response_id: str, end_stored: Callable[[], bool]) -> None:
        if response_id in self._held:
            self._held.discard(response_id)
            if end_stored():
                self._dropped.add(response_id)
            else:
                log.error("the end of %s is not stored: its lease is left to expire, so "
                          "a sweep closes it", response_id)

    async def renew(self) -> None:
        held = sorted(self._held)
        dropped = sorted(self._dropped)
        lost = await self._table.renew(ttl_ms=self._ttl_ms, held=held, dropped=dropped)
        self._dropped.difference_update(dropped)
        for response_id in lost:
            if response_id in self._held:
                log.error("lease of %s expired while it ran here: stopping it", response_id)
                self._held.discard(response_id)
                self._interrupt(response_id, LEASE_LOST)

    # -- everyone's side ---------------------------------------------------------------------
    async def sweep(self) -> int:
        """Close the responses whose lease expired; how many this call closed."""
        closed = 0
        for response_id in await self._table.expired(SWEEP_LIMIT):
            if response_id in self._held:
                continue  # ours: renewed by the next tick, or stopped by it
            if await self._reap(response_id):
                closed += 1
        return closed

    async def check(self, record: ResponseRecord) -> tuple[ResponseRecord, LeaseState]:
        """`record` as it stands and its lease, after closing it if it is an `in_progress`
        foreground response whose writer's lease has expired (a GET, a replay)."""
        if record.status != t.S_IN_PROGRESS or record.background:
            return record, LeaseState.ABSENT
        state = await self._table.state(record.id)
        if state is not LeaseState.EXPIRED:
            return record, state
        await self._reap(record.id)
        current = await self._store.get_response(record.tenant, record.id)
        return current or record, state

    async def run(self) -> None:
        """The one loop per process: renew every third of a lease, sweep every half."""
        renew_every, sweep_every = self._ttl / 3, self._ttl / 2
        clock = asyncio.get_running_loop()
        swept = clock.time()
        while True:
            await asyncio.sleep(renew_every)
            try:
                await self.renew()
                if clock.time() - swept >= sweep_every:
                    swept = clock.time()
                    await self.sweep()
            except ProxyError as exc:  # the store is out: /readyz says so; try next tick
                log.warning("lease renewal failed: %s", failure_cause(exc))

    async def _reap(self, response_id: str) -> bool:
        if not await self._table.claim(response_id, self._owner, self._ttl_ms):
            return False  # another instance is closing it
        record = await self._store.get_response_any(response_id)
        if record is not None and record.status == t.S_IN_PROGRESS and not record.background:
            await self._close(record)
            log.warning("closed %s: its instance stopped renewing its lease", response_id)
        await self._table.renew(ttl_ms=self._ttl_ms, dropped=[response_id])
        return True

    async def _close(self, record: ResponseRecord) -> None:
        """Complete the response from where its log stopped, as a dead worker's job is
        (services/jobs/runner.py): the terminal event and the final object stored together."""
        await self._event_log.end(record, lambda a: a.fail(LOST), ids=self._ids, clock=self._clock)


class _Held:
    """`Leases.held`'s context: a class, not an `asynccontextmanager`, whose async generator
    (made, registered with the loop, stepped twice and closed) cost ~3 µs per stored stream
    for two plain steps."""

    __slots__ = ("_end_stored", "_leases", "_response_id", "_taken")

    def __init__(self, leases: Leases, response_id: str, end_stored: Callable[[], bool],
                 taken: bool) -> None:
        self._leases = leases
        self._response_id = response_id
        self._end_stored = end_stored
        self._taken = taken

    async def __aenter__(self) -> None:
        if self._taken:  # a stored stream's (the create took it): nothing to wait for
            self._leases._register(self._response_id)
        else:
            await self._leases._take(self._response_id)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self._leases._let_go(self._response_id, self._end_stored)
