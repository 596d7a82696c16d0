"""`Ticks` (proxy/web/ticks.py): many streams' timed checks on one timer of the loop, each run at
its own time, on a loop whose clock and timers the test drives."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from proxy.web.ticks import Ticks
from tests.support.handloop import HandLoop


class _On:
    """A `Ticks` whose checks are all on the test's loop."""

    def __init__(self, ticks: Ticks, loop: HandLoop) -> None:
        self.ticks = ticks
        self.loop = loop

    def at(self, when: float, callback: Callable[[float], None]) -> Any:
        return self.ticks.at(when, callback, self.loop)  # type: ignore[arg-type]

    @property
    def held(self) -> int:
        return self.ticks.held


def _ticks() -> tuple[_On, HandLoop, list[tuple[str, float, float]]]:
    loop = HandLoop()
    ran: list[tuple[str, float, float]] = []
    return _On(Ticks(), loop), loop, ran


def test_each_check_runs_at_its_time_on_one_loop_timer() -> None:
    ticks, loop, ran = _ticks()
    for i in range(1000):  # a burst of streams, each with its check 15 s on
        loop.now = i * 0.001
        ticks.at(loop.now + 15, lambda when, i=i: ran.append((f"s{i}", when, loop.now)))
    assert loop.armed == 1 and loop.pending == 1  # before: a loop timer per stream
    loop.advance(15.5)
    assert [name for name, _, _ in ran] == [f"s{i}" for i in range(1000) if i * 0.001 <= 0.5]
    assert all(when <= now for _, when, now in ran) and loop.pending == 1
    loop.advance(100)
    assert len(ran) == 1000 and loop.pending == 0


def test_an_earlier_check_rearms_the_timer() -> None:
    ticks, loop, ran = _ticks()
    ticks.at(10, lambda when: ran.append(("late", when, loop.now)))
    ticks.at(2, lambda when: ran.append(("early", when, loop.now)))
    loop.advance(20)
    assert ran == [("early", 2, 2), ("late", 10, 10)] and loop.pending == 0


def test_a_check_that_comes_due_a_tick_early_still_runs() -> None:
    """The loop may run its timer a clock tick before the time it was set for: the checks due
    at that time run, told the time they were due for."""
    ticks, loop, ran = _ticks()
    ticks.at(5.0, lambda when: ran.append(("a", when, loop.now)))
    timer = loop.timers[0]
    loop.timers.clear()
    loop.now = 4.999
    timer.callback()
    assert ran == [("a", 5.0, 4.999)]


def test_a_cancelled_check_never_runs_and_the_heap_stays_bounded() -> None:
    ticks, loop, ran = _ticks()
    for i in range(10_000):
        ticks.at(15 + i * 0.001, lambda when: ran.append(("x", when, 0))).cancel()
    keep = ticks.at(20, lambda when: ran.append(("kept", when, loop.now)))
    assert ticks.held <= 2 * 1 + 1024 + 1
    loop.advance(60)
    assert ran == [("kept", 20, 20)] and keep.callback is None


def test_a_check_that_asks_for_the_next_one_while_running() -> None:
    """A stream's check sets its next (the pinger every `ping` seconds): the timer is armed for
    the earliest entry left, whoever asked first."""
    ticks, loop, ran = _ticks()

    def every_second(when: float) -> None:
        ran.append(("beat", when, loop.now))
        if when < 3:
            ticks.at(when + 1, every_second)

    ticks.at(1, every_second)
    ticks.at(2.5, lambda when: ran.append(("other", when, loop.now)))
    loop.advance(10)
    assert [(name, when) for name, when, _ in ran] == [
        ("beat", 1), ("beat", 2), ("other", 2.5), ("beat", 3)]


def test_a_failing_check_stops_no_other(caplog: pytest.LogCaptureFixture) -> None:
    ticks, loop, ran = _ticks()

    def broken(when: float) -> None:
        raise ValueError("a bug")

    ticks.at(1, broken)
    ticks.at(1, lambda when: ran.append(("same time", when, loop.now)))
    ticks.at(5, lambda when: ran.append(("later", when, loop.now)))
    with caplog.at_level(logging.ERROR, logger="proxy.web"):
        loop.advance(10)
    assert [name for name, _, _ in ran] == ["same time", "later"]
    assert "timed check failed" in caplog.text


def test_an_app_served_again_on_a_new_loop_starts_afresh() -> None:
    ticks = Ticks()
    old, new = HandLoop(), HandLoop()
    ran: list[str] = []
    ticks.at(5, lambda when: ran.append("old"), old)  # type: ignore[arg-type]
    ticks.at(7, lambda when: ran.append("new"), new)  # type: ignore[arg-type]
    assert old.pending == 0 and new.pending == 1 and ticks.held == 1
    new.advance(10)
    assert ran == ["new"]
