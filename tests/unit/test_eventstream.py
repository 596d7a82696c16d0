"""`EventStream`'s send timeout, driven through ASGI callables: a `send` that never returns
stands for a client that stopped reading (uvicorn's `send` waits for the socket to drain)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from proxy.core.errors import StoreUnavailable
from proxy.web.eventstream import EventStream


class Body:
    """An endless body that records whether it was closed (its cleanup aborts the upstream)."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.sent = 0

    async def frames(self) -> AsyncIterator[bytes]:
        try:
            while True:
                self.sent += 1
                yield b"data: x\n\n"
                await asyncio.sleep(0)
        finally:
            self.closed.set()


async def never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_send_blocked_past_the_send_timeout_abandons_the_stream() -> None:
    body = Body()
    blocked = asyncio.Event()
    written: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            written.append(message["body"])
            if len(written) == 3:  # the client stops reading here
                blocked.set()
                await asyncio.Event().wait()

    stream = EventStream(body.frames(), ping=0, send_timeout=0.2)
    async with asyncio.timeout(10):  # the bound of the test, not a speed assertion
        await stream({"type": "http"}, never_disconnects, send)
    assert blocked.is_set() and stream.stalled and body.closed.is_set()
    assert written == [b"data: x\n\n"] * 3  # nothing after the stall, no end-of-body message


async def test_a_slow_reader_that_keeps_reading_is_not_abandoned() -> None:
    """The stream takes longer than the send timeout in all, each write well under it."""
    frames = [b"data: %d\n\n" % i for i in range(12)]

    async def finite() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    written: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await asyncio.sleep(0.1)  # every write takes a while, yet each completes
            written.append(message["body"])

    stream = EventStream(finite(), ping=0, send_timeout=0.5)
    async with asyncio.timeout(10):
        await stream({"type": "http"}, never_disconnects, send)
    assert not stream.stalled and written == [*frames, b""]


async def test_a_body_that_fails_part_way_is_cut_not_ended_as_if_whole() -> None:
    """A replay that loses the store after its first frames: no end-of-body message, so the
    client sees a broken transfer (and reads again) rather than a stream that looks complete."""

    async def failing() -> AsyncIterator[bytes]:
        yield b"data: 0\n\n"
        raise StoreUnavailable("injected")

    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async with asyncio.timeout(10):
        await EventStream(failing(), ping=0)({"type": "http"}, never_disconnects, send)
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert [m["body"] for m in bodies] == [b"data: 0\n\n"]
    assert all(m["more_body"] for m in bodies)


async def test_after_the_first_bytes_the_body_skips_the_wrapped_send() -> None:
    """The start and the first body bytes go through the middlewares' `send` (status, headers,
    time to first byte); the rest goes to the send beneath them (`BODY_SEND`), in order."""
    from proxy.web.middleware.access import BODY_SEND

    frames = [b"", b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]
    wire: list[tuple[str, bytes | None]] = []

    async def finite() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    async def raw(message: dict[str, Any]) -> None:
        wire.append(("raw", message.get("body")))

    async def wrapped(message: dict[str, Any]) -> None:
        wire.append(("wrapped", message.get("body")))
        await raw(message)
        wire.pop()  # counted once, as wrapped

    stream = EventStream(finite(), ping=0, send_timeout=0)
    async with asyncio.timeout(10):
        await stream({"type": "http", BODY_SEND: raw}, never_disconnects, wrapped)
    assert wire == [("wrapped", None), ("wrapped", b""), ("wrapped", b"data: 0\n\n"),
                    ("raw", b"data: 1\n\n"), ("raw", b"data: 2\n\n"), ("raw", b"")]



# -- pings (timer callbacks: no task per stream until one is due) -------------------------------
async def test_a_silent_stream_gets_pings_and_a_busy_one_none() -> None:
    from proxy.core.events.sse import PING

    release = asyncio.Event()
    written: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        for i in range(6):  # busy: a frame every 20 ms, under the 100 ms ping interval
            yield b"data: %d\n\n" % i
            await asyncio.sleep(0.02)
        await release.wait()  # then silent
        yield b"data: end\n\n"

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            written.append(message["body"])
            if written.count(PING) == 2:
                release.set()

    stream = EventStream(body(), ping=0.1, send_timeout=0)
    async with asyncio.timeout(10):
        await stream({"type": "http"}, never_disconnects, send)
    first_ping = written.index(PING)
    assert written[:first_ping] == [b"data: %d\n\n" % i for i in range(6)]
    assert written[first_ping:] == [PING, PING, b"data: end\n\n", b""]


async def test_a_blocked_ping_is_not_doubled_and_nothing_outlives_the_stream() -> None:
    """A ping whose send blocks (the client stopped reading) is the only one pending; the send
    watchdog then abandons the stream, and no timer or ping task is left behind."""
    from proxy.core.events.sse import PING

    written: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        yield b"data: 0\n\n"
        await asyncio.Event().wait()  # silent for ever
        yield b""

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            written.append(message["body"])
            if message["body"] == PING:
                await asyncio.Event().wait()  # blocked

    before = asyncio.all_tasks()
    stream = EventStream(body(), ping=0.02, send_timeout=0.3)
    async with asyncio.timeout(10):
        await stream({"type": "http"}, never_disconnects, send)
    assert stream.stalled and written == [b"data: 0\n\n", PING]
    await asyncio.sleep(0)  # the cancelled tasks finish
    assert {t for t in asyncio.all_tasks() - before if not t.done()} == set()


async def test_a_ping_whose_write_fails_ends_the_stream_as_a_departure() -> None:
    from proxy.core.events.sse import PING

    written: list[bytes] = []

    async def body_then_silence() -> AsyncIterator[bytes]:
        yield b"data: 0\n\n"
        await asyncio.Event().wait()
        yield b""

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if message["body"] == PING:
                raise OSError("connection reset")
            written.append(message["body"])

    stream = EventStream(body_then_silence(), ping=0.02, send_timeout=0)
    async with asyncio.timeout(10):  # without the cancel the body would wait for ever
        await stream({"type": "http"}, never_disconnects, send)
    assert written == [b"data: 0\n\n"] and not stream.stalled


# -- nothing is held back to be joined with later items -------------------------------------
def _batch(kind: str) -> list[tuple[str, bytes]]:
    return [(kind, b'{"type":"%s"}' % kind.encode())]


async def test_the_first_event_is_sent_before_the_next_item_is_ready() -> None:
    """A batch is written as soon as it is made, not held to be joined with the next one: the
    first batch is out while the body still waits for its second (the upstream's first token).
    Every event of one upstream read is already one batch, hence one send (web/rendering.py)."""
    from proxy.core.events.sse import frames
    from proxy.web.rendering import stream_response

    release = asyncio.Event()
    written: list[bytes] = []
    first_sent = asyncio.Event()

    async def body() -> AsyncIterator[list[tuple[str, bytes]]]:
        yield _batch("response.created")
        await release.wait()
        yield _batch("response.completed")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            written.append(message["body"])
            first_sent.set()

    async with asyncio.timeout(10):
        task = asyncio.create_task(
            stream_response(body())({"type": "http"}, never_disconnects, send))
        await first_sent.wait()
        assert not release.is_set() and written == [frames(_batch("response.created"))]
        release.set()
        await task
    assert written == [frames(_batch("response.created")), frames(_batch("response.completed"))]


async def test_the_terminal_batch_goes_out_with_the_end_and_the_body_still_runs_to_its_end(
        ) -> None:
    """The batch ending with the terminal event is the body's last message (`more_body`
    false): one write for it and the chunked end, not two. The server then reports the
    exchange over as a disconnect at once; what the body does after its last item (a stored
    turn's end hooks) still runs, uncancelled."""
    from proxy.core.events.sse import frames
    from proxy.web.rendering import stream_response

    messages: list[dict[str, Any]] = []
    over = asyncio.Event()
    after_last: list[str] = []

    async def body() -> AsyncIterator[list[tuple[str, bytes]]]:
        yield _batch("response.created")
        yield _batch("response.completed")
        await asyncio.sleep(0)  # a suspension after the last item, where a cancel would land
        await asyncio.sleep(0)
        after_last.append("ran")

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)
        if message["type"] == "http.response.body" and not message["more_body"]:
            over.set()

    async def receive() -> dict[str, Any]:
        await over.wait()  # as uvicorn: once the response is complete, a disconnect
        return {"type": "http.disconnect"}

    async with asyncio.timeout(10):
        await stream_response(body())({"type": "http"}, receive, send)
    bodies = [(m["body"], m["more_body"]) for m in messages if m["type"] == "http.response.body"]
    assert bodies == [(frames(_batch("response.created")), True),
                      (frames(_batch("response.completed")), False)]
    assert after_last == ["ran"]


@contextlib.contextmanager
def _timers_armed() -> Iterator[list[float]]:
    """The times of the loop timers armed meanwhile (the running loop's `call_at` counted)."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, callback, *args, **kwargs)

    loop.call_at = counted  # type: ignore[method-assign]
    try:
        yield armed
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]


async def test_the_pinger_and_the_watchdog_share_one_timer() -> None:
    """A stream with both on holds one timer at a time (each made, pushed on the loop's heap
    and cancelled costs a stream ~1.5 µs), and both still run: pings while silent."""
    from proxy.core.events.sse import PING

    written: list[bytes] = []
    release = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"data: 0\n\n"
        await release.wait()
        yield b"data: end\n\n"

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            written.append(message["body"])
            if message["body"] == PING:
                release.set()

    stream = EventStream(body(), ping=0.05, send_timeout=0.2)
    with _timers_armed() as armed:
        serving = asyncio.create_task(stream({"type": "http"}, never_disconnects, send))
        await asyncio.sleep(0)
        assert len(armed) == 1  # one timer set up, not one for each check
        async with asyncio.timeout(10):
            await serving
    assert written == [b"data: 0\n\n", PING, b"data: end\n\n", b""] and not stream.stalled


async def test_the_streams_of_one_app_share_one_loop_timer() -> None:
    """Streams given the app's `Ticks` (web/ticks.py) arm one timer of the loop between them
    (before: one each, ~2 µs of every stream's set-up), and each still gets its pings."""
    from proxy.core.events.sse import PING
    from proxy.web.ticks import Ticks

    ticks = Ticks()
    written: list[list[bytes]] = [[], [], []]
    pinged = [asyncio.Event() for _ in written]

    def body(i: int) -> AsyncIterator[bytes]:
        async def frames() -> AsyncIterator[bytes]:
            yield b"data: 0\n\n"
            await pinged[i].wait()
        return frames()

    def sender(i: int) -> Any:
        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                written[i].append(message["body"])
                if message["body"] == PING:
                    pinged[i].set()
        return send

    with _timers_armed() as armed:
        serving = [asyncio.create_task(
            EventStream(body(i), ping=0.05, send_timeout=5, ticks=ticks)(
                {"type": "http"}, never_disconnects, sender(i))) for i in range(3)]
        await asyncio.sleep(0)
        assert len(armed) == 1, armed
        async with asyncio.timeout(10):
            await asyncio.gather(*serving)
    assert written == [[b"data: 0\n\n", PING, b""]] * 3
