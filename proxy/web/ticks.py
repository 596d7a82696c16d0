"""`Ticks`: the timed checks of many streams on one timer of the loop.

Each SSE stream has a pinger and a send watchdog (web/eventstream.py `_Timers`), one check due
a few seconds on; a short answer ends long before it. A timer of the loop per stream (uvloop:
a handle allocated, started, stopped and closed) cost each stream ~2 µs of its set-up, which a
burst makes hundreds of times at once. Here a stream's next check is an entry pushed on a heap;
one loop timer is armed, at the earliest entry (re-armed only when an earlier one comes, i.e.
streams with a shorter interval), and runs every entry due when it fires, each told the time it
was due for (the loop may run a timer a clock tick early, so "now" would not tell).

`Tick.cancel` only forgets its callback: the entry leaves the heap when it comes due. With
many cancelled entries waiting (more than half the heap, and over `_COMPACT_AT`) the heap is
rebuilt without them, so a flood of short streams holds at most about twice the live checks.

One `Ticks` serves one app (web/state.py `WebState.ticks`) on the loop its streams run on (an
app served again on a new loop, as tests do, starts it afresh there); a stream served outside
an app makes its own.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
from collections.abc import Callable

log = logging.getLogger("proxy.web")

# Cancelled entries past which (and past half the heap) the heap is rebuilt without them.
_COMPACT_AT = 1024


class Tick:
    """One check: `callback(when)` at `when`, unless cancelled first."""

    __slots__ = ("_ticks", "callback", "when")

    def __init__(self, ticks: Ticks, when: float, callback: Callable[[float], None]) -> None:
        self._ticks = ticks
        self.when = when
        self.callback: Callable[[float], None] | None = callback

    def cancel(self) -> None:
        if self.callback is not None:
            self.callback = None
            self._ticks.dropped()


class Ticks:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heap: list[tuple[float, int, Tick]] = []
        self._order = itertools.count()  # ties run in the order they were asked for
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf  # -inf while the due entries run: nothing re-arms meanwhile
        self._cancelled = 0

    def at(self, when: float, callback: Callable[[float], None],
           loop: asyncio.AbstractEventLoop) -> Tick:
        """`callback(when)` once `loop`'s clock (the running loop's) reaches `when`."""
        if loop is not self._loop:  # the first use, or the app served on a new loop
            self._restart(loop)
        tick = Tick(self, when, callback)
        heapq.heappush(self._heap, (when, next(self._order), tick))
        if when < self._timer_at:
            self._arm(when)
        return tick

    @property
    def held(self) -> int:
        """Entries held (cancelled ones not yet dropped included)."""
        return len(self._heap)

    def dropped(self) -> None:
        self._cancelled += 1
        if self._cancelled > _COMPACT_AT and self._cancelled * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if entry[2].callback is not None]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _restart(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`, with nothing held: the checks of another loop's streams are gone with
        it."""
        if self._timer is not None:
            self._timer.cancel()
        self._loop = loop
        self._heap = []
        self._timer = None
        self._timer_at = math.inf
        self._cancelled = 0

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._due)

    def _due(self) -> None:
        assert self._loop is not None
        due = max(self._timer_at, self._loop.time())
        self._timer = None
        self._timer_at = -math.inf
        heap = self._heap
        try:
            while heap and heap[0][0] <= due:
                tick = heapq.heappop(heap)[2]
                callback = tick.callback
                if callback is None:
                    self._cancelled -= 1
                    continue
                tick.callback = None
                try:
                    callback(tick.when)
                except Exception:  # one stream's bug must not stop every other's checks
                    log.exception("a stream's timed check failed")
        finally:
            self._timer_at = math.inf
            if heap:
                self._arm(heap[0][0])
