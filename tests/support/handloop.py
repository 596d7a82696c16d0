"""A loop's clock and timers driven by the test's hand: `time()`, `call_at()` and
`call_later()` as code under test uses them, `advance(to)` running every timer due by then in
time order (each at its own time), so timed behaviour is checked without waiting."""

from __future__ import annotations

from collections.abc import Callable


class HandTimer:
    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at = at
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class HandLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[HandTimer] = []
        self.armed = 0  # timers made so far

    def time(self) -> float:
        return self.now

    def call_at(self, at: float, callback: Callable[[], None]) -> HandTimer:
        self.armed += 1
        timer = HandTimer(at, callback)
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> HandTimer:
        return self.call_at(self.now + delay, callback)

    def advance(self, to: float) -> None:
        """Move the clock to `to`, running the timers due by then, the earliest first (a timer
        set for the past runs at once, the clock not moved back)."""
        while True:
            due = [t for t in self.timers if not t.cancelled and t.at <= to]
            if not due:
                break
            first = min(due, key=lambda t: t.at)
            self.timers.remove(first)
            self.now = max(self.now, first.at)
            first.callback()
        self.now = to

    @property
    def pending(self) -> int:
        return sum(not t.cancelled for t in self.timers)
