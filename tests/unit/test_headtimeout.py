"""The head deadline (proxy/process/headtimeout.py `HeadDeadline`) on a loop whose clock and
timers the test drives: each head must be whole `seconds` after its first byte, with one timer
per connection rather than one made and cancelled per head."""

from __future__ import annotations

from proxy.process.headtimeout import HeadDeadline
from tests.support.handloop import HandLoop


def _deadline(seconds: float = 10.0) -> tuple[HeadDeadline, HandLoop, list[float]]:
    loop = HandLoop()
    expired: list[float] = []
    deadline = HeadDeadline(loop, seconds, lambda: expired.append(loop.now))  # type: ignore[arg-type]
    return deadline, loop, expired


def test_a_stalled_head_expires_at_its_deadline() -> None:
    deadline, loop, expired = _deadline()
    loop.advance(1.0)
    deadline.start()
    loop.advance(5.0)
    deadline.start()  # later bytes of the same head do not move it
    loop.advance(20.0)
    assert expired == [11.0]


def test_a_head_whole_in_time_never_expires() -> None:
    deadline, loop, expired = _deadline()
    deadline.start()
    loop.advance(9.9)
    deadline.stop()
    loop.advance(60.0)
    assert expired == []


def test_a_later_head_has_its_own_deadline() -> None:
    """The timer armed by the first head finds a second one being read: it waits for that
    head's own deadline, not the first's."""
    deadline, loop, expired = _deadline()
    deadline.start()
    loop.advance(0.1)
    deadline.stop()
    loop.advance(9.0)
    deadline.start()  # the next request's head, stalled
    loop.advance(30.0)
    assert expired == [19.0]


def test_a_kept_alive_connection_arms_one_timer_not_one_per_head() -> None:
    """Before: each head made a timer and its end cancelled it (1,000 here); now a timer is
    armed only when none is, and fires once per `seconds` while heads keep coming."""
    deadline, loop, expired = _deadline()
    for i in range(1000):
        loop.advance(i * 0.01)
        deadline.start()
        loop.advance(i * 0.01 + 0.001)
        deadline.stop()
    assert expired == [] and loop.armed <= 2, loop.armed


def test_a_closed_connection_leaves_no_timer() -> None:
    deadline, loop, expired = _deadline()
    deadline.start()
    deadline.close()
    loop.advance(60.0)
    assert expired == [] and all(t.cancelled for t in loop.timers)
