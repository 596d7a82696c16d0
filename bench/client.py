"""A minimal HTTP/1.1 keep-alive client for streamed answers: asyncio `Protocol` + httptools.

Measured per exchange: the time the request was written, the time the first content delta
arrived (`first`), the time the body ended, the number of deltas, the HTTP status and, when
something went wrong, why. One `Connection` runs one exchange at a time; the load generator
keeps one connection per simulated client, so every request after the first reuses its socket.

Why not httpx or `asyncio` streams: the load generator shares a core with the simulator and
must read 12,800 events/s without becoming the bottleneck. Here a socket read costs one
`data_received` call, httptools' C parser (status line, headers, chunked framing) and one
`StreamCheck.feed` per body piece, with no per-read coroutine switch, task or buffer copy.

Every exchange is bounded: a timer aborts the connection at the deadline (error `timeout`), a
closed or reset connection ends the exchange (error `connection lost`), a malformed response
ends it too (`bad HTTP`); a non-200 answer is the error `HTTP <status>: <its error message>`.
A response the server will not keep alive closes the connection after its end; the caller
then opens a new one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import cast

import httptools
import orjson

from bench.checks import StreamCheck

# Timestamps come from perf_counter, not `loop.time()`: uvloop's loop clock has a 1 ms
# resolution and is cached per loop iteration, which would quantise every TTFT.
now = time.perf_counter
ERROR_BODY_LIMIT = 2048  # of a non-200 answer, kept to report its error message


class Tally:
    """Counters shared by every connection of a row (read by the window's timer)."""

    __slots__ = ("tokens",)

    def __init__(self) -> None:
        self.tokens = 0


@dataclass
class Exchange:
    """One request and its answer; times are `time.perf_counter()` seconds."""

    sent: float
    first: float | None = None
    ended: float = 0.0
    status: int = 0
    deltas: int = 0
    error: str | None = None
    body: bytes | None = None  # only when captured


class Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, tally: Tally) -> None:
        self._loop = loop
        self._tally = tally
        self._transport: asyncio.Transport | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._check: StreamCheck | None = None
        self._current: Exchange | None = None
        self._done: asyncio.Future[Exchange] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._pieces: list[bytes] | None = None
        self._expected = 0
        self._error_body = b""
        self._keep_alive = True
        self.closed = False

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same API.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(f"bad HTTP: {exc}")

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost ends any open exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish("connection lost")

    # -- httptools callbacks -----------------------------------------------------------------
    def on_headers_complete(self) -> None:
        parser = self._parser
        exchange = self._current
        if parser is not None and exchange is not None:
            exchange.status = parser.get_status_code()
            self._keep_alive = parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        check = self._check
        exchange = self._current
        if check is None or exchange is None:
            return
        if exchange.status != 200:
            if len(self._error_body) < ERROR_BODY_LIMIT:
                self._error_body += body[:ERROR_BODY_LIMIT]
            return
        before = check.deltas
        check.feed(body)
        new = check.deltas - before
        if new:
            self._tally.tokens += new
            if exchange.first is None:
                exchange.first = now()
        if self._pieces is not None:
            self._pieces.append(body)

    def on_message_complete(self) -> None:
        self._finish(None)

    # -- exchanges ---------------------------------------------------------------------------
    def exchange(self, request: bytes, check: StreamCheck, expected: int, timeout: float,
                 *, capture: bool = False) -> asyncio.Future[Exchange]:
        """Write `request`; the future resolves when its answer has ended (or failed)."""
        if self._done is not None:
            raise RuntimeError("one exchange at a time")
        done: asyncio.Future[Exchange] = self._loop.create_future()
        self._current = Exchange(sent=now())
        self._done = done
        self._check = check
        self._expected = expected
        self._pieces = [] if capture else None
        self._error_body = b""
        if self.closed or self._transport is None:
            self._finish("connection closed")
            return done
        self._parser = httptools.HttpResponseParser(self)
        self._timer = self._loop.call_later(timeout, self._timed_out)
        self._transport.write(request)
        return done

    def _timed_out(self) -> None:
        self._timer = None
        self._finish("timeout")
        self.close()

    def _finish(self, error: str | None) -> None:
        exchange, done = self._current, self._done
        if exchange is None or done is None:
            return
        self._current = self._done = None
        self._parser = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        exchange.ended = now()
        check = self._check
        self._check = None
        if check is not None:
            exchange.deltas = check.deltas
        if error is None and exchange.status != 200:
            error = f"HTTP {exchange.status}" + _error_message(self._error_body)
        if error is None and check is not None:
            error = check.verdict(self._expected)
        exchange.error = error
        if self._pieces is not None:
            exchange.body = b"".join(self._pieces)
            self._pieces = None
        if not self._keep_alive or error is not None:
            self.close()  # a failed exchange may leave bytes in flight: never reuse it
        if not done.done():
            done.set_result(exchange)

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()


def _error_message(body: bytes) -> str:
    """`: <message>` from an OpenAI-style error body, or nothing."""
    try:
        data = orjson.loads(body)
        message = data["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return f": {str(message)[:120]}" if message else ""


async def connect(host: str, port: int, tally: Tally, timeout: float) -> Connection:
    """A new connection (TCP_NODELAY is set by asyncio for TCP transports)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        _, protocol = await loop.create_connection(lambda: Connection(loop, tally), host, port)
    return protocol
