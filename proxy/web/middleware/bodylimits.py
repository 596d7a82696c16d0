"""Request-body size limit: what the front middleware (front.py) checks and counts.

A declared `Content-Length` over the limit is refused before a byte is read; a chunked body is
counted as it arrives and refused the moment it passes the limit (the handler's `body()` raises,
and the one error path renders the 413).

A file upload (`POST /v1/files`) has its own limit: the largest file (`--max-file-bytes`)
plus `MULTIPART_SLACK` for the multipart framing and the other fields, bounded the same way as
it streams in; the route then holds the file itself to exactly `--max-file-bytes`.

A body that pauses longer than `--body-timeout` between two reads is a 408: a client that opens
a body and stops sending would otherwise hold its task (and an upload its slot, and its spooled
file) for as long as it keeps the connection. Only reads of the body are timed: once it is
whole, a stream's wait for the client's disconnect is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Iterator
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope

from proxy.core.errors import PayloadTooLarge, RequestTimeout
from proxy.web.errors import error_response


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")


UPLOAD_PATH = "/v1/files"
# Boundaries, part headers, `purpose`, `expires_after` and a filename: a few hundred bytes from
# the SDKs; 64 KiB leaves room for any client's framing and still bounds the body.
MULTIPART_SLACK = 64 * 1024


def _too_slow(seconds: float) -> RequestTimeout:
    return RequestTimeout(f"The request body paused for more than {seconds:g} seconds.")


class BodyLimits:
    """The limits the front middleware (front.py) puts on every HTTP request's body."""

    def __init__(self, limit: int, upload_limit: int | None = None, *, idle: float) -> None:
        self.limit = limit
        self.upload_limit = limit if upload_limit is None else upload_limit + MULTIPART_SLACK
        self.idle = idle

    def of(self, scope: Scope) -> int:
        """The limit of this request's body."""
        return (self.upload_limit if scope["path"] == UPLOAD_PATH and scope["method"] == "POST"
                else self.limit)

    def refusal(self, limit: int, declared: list[bytes]) -> ASGIApp | None:
        """A 413 when a declared `Content-Length` is over `limit`: refused unread."""
        for value in declared:
            try:
                size = int(value)
            except ValueError:
                continue
            if size > limit:
                return error_response(_too_large(limit))
        return None

    def counted(self, limit: int, receive: Receive) -> Receive:
        """`receive`, with the body counted against `limit` and each read timed."""
        return _Counted(limit, self.idle, receive).receive


class _Counted:
    """One request's body: counted, and each read of it that waits timed by one lazy timer.

    An `asyncio.timeout` per read cost ~9 µs (a Timeout object, a timer armed and cancelled)
    even when the whole body came with the head and the read never waits. Here a read is
    first stepped once by hand: a body already there (the common case: a request's head and
    body in one packet) is returned at once, with no clock, task or timer looked at (a timer
    armed and cancelled per request was ~2 µs of it, the loop and task lookups two `getpid`
    system calls). A read that waits notes when it started; one timer, armed at the first such
    read, checks at its deadline whether a read has been waiting for `idle` seconds: if not, it
    re-arms at the waiting read's own deadline, or lapses when no read is waiting (the next one
    arms it again). The same limit on a pause between two reads, one timer per body at most.
    """

    __slots__ = ("expired", "idle", "inner", "limit", "received", "since", "timer", "waiting",
                 "whole")

    def __init__(self, limit: int, idle: float, receive: Receive) -> None:
        self.limit = limit
        self.idle = idle
        self.inner = receive
        self.received = 0
        self.whole = False
        self.waiting: asyncio.Task[object] | None = None  # the task whose read is waiting
        self.since = 0.0  # when that read began (the loop's clock)
        self.timer: asyncio.TimerHandle | None = None
        self.expired = False

    async def receive(self) -> Message:
        if self.whole:  # the body is in: what is left to receive is the client's leaving
            return await self.inner()
        reading = self.inner().__await__()
        message: Message
        step = getattr(reading, "send", None)
        if step is None:
            # An awaitable a coroutine did not make (granian's receive is a Rust future): an
            # iterator need not take `send`, so it is awaited as it is, and timed
            message = await self._timed(_Whole(reading))
        else:
            try:
                first = step(None)
            except StopIteration as done:  # there already: nothing waited, nothing to time
                message = done.value
            else:
                message = await self._timed(_Rest(reading, first))
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self._stop()
                raise _too_large(self.limit)
            if not message.get("more_body", False):
                self.whole = True
                self._stop()
        return message

    async def _timed(self, rest: Awaitable[Message]) -> Message:
        """The rest of a read that waits, timed."""
        loop = asyncio.get_running_loop()
        self.since = loop.time()
        self.waiting = task = asyncio.current_task(loop)
        if self.timer is None:
            self.timer = loop.call_at(self.since + self.idle, self._check)
        try:
            return await rest
        except asyncio.CancelledError:
            expired, self.expired = self.expired, False  # a later read's cancel is not ours
            if expired and task is not None and task.uncancel() == 0:
                raise _too_slow(self.idle) from None
            raise
        finally:
            self.waiting = None

    def _check(self) -> None:
        """At the timer's deadline: the waiting read timed out, or the timer moves on."""
        self.timer = None
        waiting = self.waiting
        if waiting is None:  # no read waits: the next one arms the timer again
            return
        loop = asyncio.get_running_loop()
        deadline = self.since + self.idle
        if loop.time() < deadline:  # a later read than the one that armed it
            self.timer = loop.call_at(deadline, self._check)
            return
        self.expired = True
        waiting.cancel()

    def _stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _Rest:
    """`await` on what is left of an await stepped once by hand (`reading` yielded `first`):
    what `yield from` would do with it, each value the task sends (or exception it throws,
    a cancellation) handed on, its result returned."""

    __slots__ = ("first", "reading")

    def __init__(self, reading: Generator[Any, Any, Message], first: Any) -> None:
        self.reading = reading
        self.first = first

    def __await__(self) -> Generator[Any, Any, Message]:
        reading, value = self.reading, self.first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                reading.close()
                raise
            except BaseException as exc:
                try:
                    value = reading.throw(exc)
                except StopIteration as done:
                    result: Message = done.value
                    return result
            else:
                try:
                    value = reading.send(sent)
                except StopIteration as done:
                    result = done.value
                    return result


class _Whole:
    """An awaitable's iterator (what its `__await__` gave), awaited as `await` would."""

    __slots__ = ("reading",)

    def __init__(self, reading: Iterator[Any]) -> None:
        self.reading: Any = reading  # an iterator: what `yield from` returns of it is untyped

    def __await__(self) -> Generator[Any, Any, Message]:
        message: Message = yield from self.reading
        return message
