"""The body's counter (web/middleware/bodylimits.py): a pause between two reads longer than
`--body-timeout` is a 408, pauses each under it are not however long the body takes, and the
reads share one timer (an `asyncio.timeout` per read cost ~9 µs each, even unwaited).

The loop's clock is the test's (`loop.time` replaced): the timer fires when the test moves the
clock past its deadline, so no assertion hangs on real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.core.errors import PayloadTooLarge, RequestTimeout
from proxy.web.middleware.bodylimits import BodyLimits
from tests.support.inprocess import receive_until
from tests.support.spies import timers_armed

IDLE = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The running loop's clock, the test's from here on."""
    fake = Clock()
    monkeypatch.setattr(asyncio.get_running_loop(), "time", fake)
    return fake


def _parts(clock: Clock, parts: int, pause: float) -> Any:
    """A receive giving `parts` chunks, each after `pause` seconds of the test's clock."""
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        for _ in range(1000):  # bounded: the clock moves in steps, the loop turns each step
            if clock.now >= sent * pause:
                break
            clock.now = min(clock.now + pause / 10, sent * pause)
            await asyncio.sleep(0)
        sent += 1
        return {"type": "http.request", "body": b"x", "more_body": sent < parts}

    return receive


async def _drain(receive: Any) -> int:
    size = 0
    for _ in range(100):
        message = await receive()
        size += len(message["body"])
        if not message["more_body"]:
            return size
    raise AssertionError("the body never ended")


async def test_pauses_each_under_the_limit_pass_however_long_the_body(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    receive = BodyLimits(1000, idle=IDLE).counted(1000, _parts(clock, 6, IDLE * 0.6))
    assert await _drain(receive) == 6
    assert clock.now == pytest.approx(IDLE * 0.6 * 5)  # 3 x the limit in all


async def test_a_pause_over_the_limit_is_a_408(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    receive = BodyLimits(1000, idle=IDLE).counted(1000, _parts(clock, 3, IDLE * 1.5))
    with pytest.raises(RequestTimeout, match="paused for more than 10 seconds"):
        await _drain(receive)
    assert IDLE <= clock.now < IDLE * 1.5


async def test_a_body_over_its_limit_is_a_413(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    receive = BodyLimits(4, idle=IDLE).counted(4, _parts(clock, 6, 0.0))
    with pytest.raises(PayloadTooLarge, match="larger than the limit of 4 bytes"):
        await _drain(receive)


async def test_the_reads_of_one_body_share_one_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    armed = timers_armed(monkeypatch)
    receive = BodyLimits(1000, idle=IDLE).counted(1000, _parts(clock, 5, IDLE * 0.1))
    assert await _drain(receive) == 5
    assert len(armed) == 1  # an asyncio.timeout per read armed 5


async def test_a_body_there_already_is_read_with_no_timer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads that do not wait (a body that came with its head) arm nothing: before, the first
    read of every body armed the timer and the last cancelled it (~2 µs a request)."""
    armed = timers_armed(monkeypatch)
    receive = BodyLimits(1000, idle=IDLE).counted(1000, _parts(Clock(), 5, 0.0))
    assert await _drain(receive) == 5
    assert armed == []


async def test_after_the_body_the_disconnect_wait_is_not_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    leave = asyncio.Event()
    receive = receive_until(b"{}", leave)

    counted = BodyLimits(1000, idle=IDLE).counted(1000, receive)
    assert (await counted())["body"] == b"{}"
    waiter = asyncio.ensure_future(counted())
    for _ in range(5):
        clock.now += IDLE
        await asyncio.sleep(0)
    assert not waiter.done()
    leave.set()
    assert (await waiter)["type"] == "http.disconnect"


async def test_after_a_408_a_cancel_of_the_next_read_stays_a_cancel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer's cancel is the one it made: a handler that reads on after a 408 and is then
    cancelled (its client gone, a drain) sees its cancel, not a second 408."""
    clock = _clock(monkeypatch)
    calls = 0
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            for _ in range(1000):  # the first read never ends: the clock passes its deadline
                clock.now += IDLE / 10
                await asyncio.sleep(0)
        await never.wait()
        raise AssertionError("never set")

    counted = BodyLimits(1000, idle=IDLE).counted(1000, receive)
    with pytest.raises(RequestTimeout):
        await counted()
    reader = asyncio.ensure_future(counted())
    for _ in range(3):
        await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


class _Stepped:
    """An awaitable whose iterator takes no `send` or `throw` (granian's receive gives a Rust
    future of that kind): the counter cannot step it by hand and awaits it as it is."""

    def __init__(self, awaitable: Any) -> None:
        self.inner = awaitable.__await__()

    def __await__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return next(self.inner)


def _stepped(receive: Any) -> Any:
    return lambda: _Stepped(receive())


async def test_a_receive_that_is_no_coroutine_is_counted_and_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clock(monkeypatch)
    receive = BodyLimits(1000, idle=IDLE).counted(1000, _stepped(_parts(clock, 4, IDLE * 0.6)))
    assert await _drain(receive) == 4
    slow = BodyLimits(1000, idle=IDLE).counted(1000, _stepped(_parts(clock, 3, IDLE * 1.5)))
    clock.now = 0.0
    with pytest.raises(RequestTimeout, match="paused for more than 10 seconds"):
        await _drain(slow)
    there = BodyLimits(4, idle=IDLE).counted(4, _stepped(_parts(Clock(), 6, 0.0)))
    with pytest.raises(PayloadTooLarge):
        await _drain(there)
