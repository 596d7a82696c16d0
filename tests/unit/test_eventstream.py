"""`EventStream`'s send timeout, driven through ASGI callables: a `send` that never returns
stands for a client that stopped reading (uvicorn's `send` waits for the socket to drain)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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
    from proxy.web.access import BODY_SEND

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


# -- the final item carries the body's end (issue 29 point 3) ----------------------------------
def _batch(*kinds: str) -> list[tuple[str, bytes]]:
    return [(kind, b'{"type":"%s"}' % kind.encode()) for kind in kinds]


async def _sent_by_a_responses_stream(batches: list[list[tuple[str, bytes]]],
                                      after: list[str]) -> list[dict[str, Any]]:
    from proxy.web.rendering import stream_response

    async def body() -> AsyncIterator[list[tuple[str, bytes]]]:
        for batch in batches:
            yield batch
        after.append("cleanup ran")  # the body is read to its end, past the final batch

    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async with asyncio.timeout(10):
        await stream_response(body())({"type": "http"}, never_disconnects, send)
    return [m for m in messages if m["type"] == "http.response.body"]


async def test_the_terminal_batch_and_the_body_end_leave_in_one_send() -> None:
    from proxy.core.events.sse import frames

    batches = [_batch("response.created", "response.in_progress"),
               _batch("response.output_text.delta"),
               _batch("response.output_text.delta", "response.output_text.done",
                      "response.completed")]
    after: list[str] = []
    sent = await _sent_by_a_responses_stream(batches, after)
    # One send per batch, the last with `more_body: False`: no separate empty end message.
    assert [(m["body"], m["more_body"]) for m in sent] == [
        (frames(batches[0]), True), (frames(batches[1]), True), (frames(batches[2]), False)]
    assert after == ["cleanup ran"]


async def test_a_stream_without_a_terminal_event_still_ends_with_an_empty_send() -> None:
    batches = [_batch("response.created"), _batch("response.output_text.delta")]
    sent = await _sent_by_a_responses_stream(batches, [])
    assert [m["more_body"] for m in sent] == [True, True, False] and sent[-1]["body"] == b""


async def test_the_first_event_is_sent_before_the_next_item_is_ready() -> None:
    """Nothing is held back to be joined with what comes later: the first batch is written
    while the body is still waiting for its second."""
    from proxy.web.rendering import stream_response

    release = asyncio.Event()
    first_sent = asyncio.Event()

    async def body() -> AsyncIterator[list[tuple[str, bytes]]]:
        yield _batch("response.created")
        await release.wait()  # the upstream's first token has not come yet
        yield _batch("response.completed")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not first_sent.is_set():
            first_sent.set()

    async def drive() -> None:
        await stream_response(body())({"type": "http"}, never_disconnects, send)

    async with asyncio.timeout(10):
        task = asyncio.create_task(drive())
        await first_sent.wait()
        assert not release.is_set()
        release.set()
        await task


async def test_an_item_after_the_final_one_is_dropped_not_sent_past_the_end() -> None:
    batches = [_batch("response.completed"), _batch("response.output_text.delta")]
    sent = await _sent_by_a_responses_stream(batches, [])
    assert [m["more_body"] for m in sent] == [False]
