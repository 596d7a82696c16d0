"""One HTTP/1.1 connection to an upstream: an asyncio `Protocol` whose responses are parsed by
`httptools` (llhttp, in C), one exchange at a time. The pool (`pool.py`) hands
connections out and takes them back; `client.py` maps the errors below to the proxy's own.

Invariants:
- One exchange in flight per connection. When it ends, the connection goes back to the pool only
  if the response was parsed to its end, the server allows keep-alive and nothing failed;
  otherwise it is closed. A response closed before its end aborts the socket at once: for vLLM a
  closed connection is the signal to stop generating.
- The per-chunk path is `data_received` -> `feed_data` -> `on_body` (append, wake the one waiting
  reader); the reader takes everything buffered per wake-up. No task, timer, cancel scope or log
  line per chunk.
- Timeouts cost nothing while data flows: a wait stores its deadline (a float) and there is one
  `loop.call_at` timer per connection, re-armed lazily. When it fires it fails the wait only if
  that wait's deadline has passed; otherwise it sleeps on until the current deadline.
- Flow control: above `HIGH_WATER` unread bytes the socket stops being read; it resumes as soon as
  the reader takes the buffer (it always takes all of it).
- Interim (1xx) responses are parsed and skipped (RFC 9110 §15.2: a client must accept them even
  unasked); `101 Switching Protocols` was never asked for and is a protocol error.
- A response head is bounded: at most `MAX_HEADERS` fields and `MAX_HEAD_BYTES` bytes, counted
  as they arrive, so a broken replica cannot make us buffer without limit. Obsolete line folding
  (obs-fold) is refused by the parser: as a gateway we answer 502 (RFC 9112 §5.2 allows it).
- Connecting: TLS with the pool's `ssl.SSLContext` for https origins; through an HTTP proxy's
  `CONNECT` tunnel when one is configured for the origin (`proxy`).

Errors, all raised with their cause attached:

    TransportError
    ├── ConnectError        refused, unreachable, DNS or TLS failure (nothing was sent)
    ├── ConnectTimeout      no connection within the connect timeout (nothing was sent)
    ├── PoolTimeout         no free connection slot within the connect timeout (nothing was sent)
    ├── ReadTimeout         no response headers, or no body bytes, in time
    └── ReadError           reset, or closed before the end of the response
        └── ProtocolError   the bytes are not an HTTP/1.1 response (parser error)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import cast

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

# Unread body bytes above which we stop reading the socket (the reader is behind).
HIGH_WATER = 1024 * 1024
# Bounds on one response head (vLLM sends a handful of short fields).
MAX_HEADERS = 100
MAX_HEAD_BYTES = 64 * 1024

Origin = tuple[str, str, int]  # (scheme, host, port): what a pooled connection is good for


class TransportError(Exception):
    """The exchange failed below HTTP semantics; the message says how."""


class ConnectError(TransportError):
    pass


class ConnectTimeout(TransportError):
    pass


class PoolTimeout(TransportError):
    pass


class ReadTimeout(TransportError):
    pass


class ReadError(TransportError):
    pass


class ProtocolError(ReadError):
    pass


@dataclass(frozen=True, slots=True)
class ExchangeTimeouts:
    """Seconds. `response` runs from sending the request to the end of the response headers,
    and to the end of the body too when `read` is None; otherwise each body read may wait
    `read` (the gap between two chunks of a stream), except that the first body byte may take
    `first` from sending the request (a stream's time to first token: vLLM answers with headers
    before it has queued the request)."""

    connect: float
    response: float
    read: float | None = None
    first: float | None = None


class Headers:
    """Response headers in arrival order, names lowercased (HTTP names are case-insensitive).
    Made from the fields as the parser gave them (`raw`), decoded on the first read: a stream's
    create reads none of them, and decoding each field as it arrived was three calls a field
    (~15 a response)."""

    __slots__ = ("_decoded", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._decoded: list[tuple[str, str]] | None = None

    @property
    def _items(self) -> list[tuple[str, str]]:
        items = self._decoded
        if items is None:
            items = self._decoded = [(name.decode("latin-1").lower(), value.decode("latin-1"))
                                     for name, value in self._raw]
        return items

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower()
        for k, v in self._items:
            if k == key:
                return v
        return default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Connection(asyncio.Protocol):
    """The socket, the parser and the state of the current exchange. The pool owns idle
    connections; a `Response` owns the one it reads from until it closes or releases it."""

    __slots__ = (
        "_buffer", "_buffered", "_close_delimited", "_complete", "_deadline", "_error",
        "_fields", "_head_bytes", "_headers", "_headers_done", "_interim", "_keep_alive",
        "_parser", "_paused", "_received",
        "_status", "_timer", "_timer_at", "_transport", "_waiter", "closed", "idle_since", "loop",
        "on_close", "origin", "reused",
    )

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        self.loop = loop
        # Called once when the connection dies; set by the pool once it counts the connection.
        self.on_close: Callable[[Connection], None] | None = None
        self.closed = False
        self.reused = False  # has served an exchange before: the server may have closed it idle
        self.idle_since = 0.0
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0
        self._paused = False
        self._reset(None)

    def _reset(self, parser: HttpResponseParser | None) -> None:
        self._parser = parser  # None while idle: a byte then is a protocol violation
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []  # as the parser gave them (`Headers`)
        self._fields = 0  # len(self._headers), kept here: a call less per field
        self._headers_done = False
        self._head_bytes = 0  # bytes received before the final response's head ended
        self._interim = False  # the message being parsed is a 1xx
        self._complete = False
        self._keep_alive = False
        self._close_delimited = False
        self._received = False  # any response byte (decides whether a failure may be retried)
        self._error: TransportError | None = None
        self._buffer: list[bytes] = []  # drained whole per wake-up, so a list beats a deque
        self._buffered = 0

    # -- the exchange, as the pool and `Response` drive it -----------------------------------
    def send(self, data: bytes) -> None:
        """Start an exchange: `data` is the whole request (head and body, one write)."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            raise ReadError("the connection was closed before the request was sent")
        self._reset(HttpResponseParser(self))
        transport.write(data)

    async def read_head(self, deadline: float) -> tuple[int, Headers]:
        while not self._headers_done:
            if self._error is not None:
                raise self._error
            await self._wait(deadline)
        return self._status, Headers(self._headers)

    @property
    def received_nothing(self) -> bool:
        return not self._received

    def reusable(self) -> bool:
        return (self._complete and self._keep_alive and self._error is None
                and not self.closed)

    def park(self) -> None:
        """The exchange is over and the connection goes idle: drop what is left of it."""
        self._reset(None)
        if self._paused:
            self._paused = False
            if self._transport is not None:
                self._transport.resume_reading()

    def take(self) -> bytes:
        """Everything buffered (b"" if nothing), and reading resumes if it was paused."""
        buffer = self._buffer
        if not buffer:
            return b""
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._buffered = 0
        if self._paused:
            self._paused = False
            if self._transport is not None:
                self._transport.resume_reading()
        return data

    def abort(self) -> None:
        """Drop the socket now (unsent and unread bytes are discarded)."""
        if self._transport is not None:
            self._transport.abort()
        self._dead()

    def close(self) -> None:
        """Close gracefully: an idle connection has nothing in flight."""
        if self._transport is not None:
            self._transport.close()
        self._dead()

    def _dead(self) -> None:
        """Once, however the connection ends: our close, the peer's, an error."""
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close(self)

    # -- waiting, with the lazily re-armed timer -----------------------------------------------
    def _wait(self, deadline: float) -> asyncio.Future[None]:
        """A future the next event (bytes, the end, an error, the deadline) resolves. Only one
        reader waits at a time."""
        waiter = self.loop.create_future()
        self._waiter = waiter
        self._deadline = deadline
        timer = self._timer
        if timer is None or deadline < self._timer_at:
            if timer is not None:
                timer.cancel()
            self._timer_at = deadline
            self._timer = self.loop.call_at(deadline, self._on_timer)
        return waiter

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits: stay disarmed until someone does
        if self.loop.time() < self._deadline:
            # The waits since we were armed moved the deadline on: sleep until the current one.
            self._timer_at = self._deadline
            self._timer = self.loop.call_at(self._deadline, self._on_timer)
            return
        what = "body bytes" if self._headers_done else "response headers"
        self._fail(ReadTimeout(f"no {what} from {self.origin[1]}:{self.origin[2]} in time"))
        self.abort()  # the exchange is lost either way; the server learns it now

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: TransportError) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # idle, or the exchange failed: nobody asked for these bytes
            self.abort()
            return
        self._received = True
        if not self._headers_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES + HIGH_WATER:  # a head never ends: fail early
                self._parser = None
                self._fail(ProtocolError(f"response head over {MAX_HEAD_BYTES} bytes"))
                self.abort()
                return
        try:
            parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade) as exc:
            raised = exc.__context__  # what one of our callbacks raised, if one did
            if isinstance(raised, ProtocolError):
                error = raised
            else:
                error = ProtocolError(f"invalid HTTP response: {exc}")
                error.__cause__ = exc
            self._parser = None
            self._fail(error)
            self.abort()

    def eof_received(self) -> bool | None:
        return None  # close our side too; `connection_lost` settles the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        if self._parser is not None and not self._complete:
            if exc is None and self._headers_done and self._close_delimited:
                self.on_message_complete()  # the body ran to the end of the connection
            else:
                error = ReadError("the connection was reset" if exc is not None else
                                  "the server closed the connection before the end of the "
                                  "response")
                error.__cause__ = exc
                self._fail(error)
        self._dead()

    # -- httptools callbacks ---------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if self._fields >= MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} response header fields")
        self._fields += 1
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        if self._headers_done:  # a second response nobody asked for: never reuse this socket
            self._keep_alive = False
            return
        status = parser.get_status_code()
        if status < 200:
            if status == 101:
                raise ProtocolError("unexpected 101 Switching Protocols (nothing was asked)")
            self._interim = True  # 100, 103 ...: skipped; the final response follows
            self._headers = []
            self._fields = 0
            return
        # Each field took at least its name, its value and 3 bytes (`:` and CRLF) of what was
        # received: a head whose bytes so far, plus one per field, are within the bound is
        # within it, without a walk of its fields (two `len` calls each, ~10 a response).
        if self._head_bytes + self._fields > MAX_HEAD_BYTES:
            size = 0
            for name, value in self._headers:
                size += len(name) + len(value) + 4
            if size > MAX_HEAD_BYTES:
                raise ProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")
        self._status = status
        self._keep_alive = parser.should_keep_alive()
        self._close_delimited = _close_delimited(status, self._headers)
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._buffer.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        waiter = self._waiter  # `_wake`, inlined: this runs once per chunk
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def on_message_complete(self) -> None:
        if self._interim:  # the end of a 1xx: the final response is still to come
            self._interim = False
            return
        self._complete = True
        self._wake()


def _close_delimited(status: int, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the body ends only when the server closes (no length, not chunked)."""
    if status in (204, 304):
        return False
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding"
                                          and value.lower().find(b"chunked") >= 0):
            return False
    return True


class Response:
    """An upstream response whose body is read as it arrives. `aclose()` on every way out: it
    gives the connection back when the body was read to its end, else aborts it. It reads its
    connection's state directly: the two are one unit, and this is the per-chunk path."""

    __slots__ = ("_closed", "_conn", "_content", "_deadline", "_first_deadline",
                 "_read_timeout", "_release", "headers", "status_code")

    def __init__(self, conn: Connection, status: int, headers: Headers, *,
                 release: Callable[[Connection], None], read_timeout: float | None,
                 deadline: float, first_deadline: float | None = None) -> None:
        self.status_code = status
        self.headers = headers
        self._conn = conn
        self._release = release
        self._read_timeout = read_timeout  # per wait; None: `deadline` bounds the whole body
        self._deadline = deadline
        self._first_deadline = first_deadline  # until the first body byte; then None
        self._closed = False
        self._content: bytes | None = None

    async def aiter_raw(self) -> AsyncGenerator[bytes, None]:
        """The body bytes as they arrive, de-chunked: each item is everything buffered since
        the previous one. Raises `ReadTimeout` / `ReadError`; ends at the message's end, having
        given the connection back."""
        conn = self._conn
        loop = conn.loop
        read_timeout = self._read_timeout
        while True:
            if self._closed:  # by another task: to this reader, the connection was cut
                raise ReadError("the response was closed while being read")
            if conn._buffer:
                self._first_deadline = None
                yield conn.take()
            elif conn._complete:
                break
            elif conn._error is not None:
                raise conn._error
            elif read_timeout is None:
                await conn._wait(self._deadline)
            elif self._first_deadline is not None:
                await conn._wait(self._first_deadline)
            else:
                await conn._wait(loop.time() + read_timeout)
        self.close()

    @property
    def buffered(self) -> bool:
        """Body bytes already received and not yet read: the next `aiter_raw` step returns
        without waiting."""
        return bool(self._conn._buffer)

    @property
    def complete(self) -> bool:
        """The whole message was received: closing now gives the connection back, with no
        read left to wait for."""
        return self._conn._complete

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self.aiter_raw()])
        return self._content

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise RuntimeError("the body was not read: `await response.aread()` first")
        return self._content

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Idempotent, synchronous (safe in a shielded cleanup task)."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.reusable():
            self._release(conn)
        else:
            conn.abort()
