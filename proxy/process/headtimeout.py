"""uvicorn's HTTP/1.1 protocols with a deadline on each request head (`--header-timeout`) and the
keep-alive timeout on a new connection (a silent connection holds nothing for long).

uvicorn starts its only timer, keep-alive, after a response: a connection that never sends a
request, or sends half a head and stalls (a byte at a time is enough), holds a descriptor and
a slot for as long as its peer likes; a few hundred of them starve every key. So:
- a new connection gets the keep-alive timer at once: silent for `timeout_keep_alive`, closed,
  as an idle keep-alive connection is;
- the first byte of every request head (the first request's or a later one's on a kept-alive
  connection) starts a deadline: the head must be complete `--header-timeout` seconds later, or
  the connection is closed (nginx's `client_header_timeout`). The deadline is fixed when the
  head starts, so trickling bytes do not extend it. A complete head ends it: the body then has
  the app's `--body-timeout`, and a WebSocket upgrade (a complete head) is not timed here.

A slow but honest client sends a head (a few hundred bytes) in one round trip: the default, 10
s, is thousands of round trips on any network a client of this API uses.

On httptools (uvicorn's `auto`, the proxy's), each request's cycle also writes its response head
with the first body bytes (headwrite.py: one `send` system call per answer less).

Both protocols uvicorn may pick are covered (its `auto` is httptools, installed with the proxy):
`protocol_for(name, seconds)` gives the subclass for a uvicorn `http` setting, which `serve`
passes as `Config(http=...)` in every process (`--workers N` included).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.process.headwrite import HeldHead, quick_start
from proxy.web.middleware.access import QUICK_START

DEFAULT_HEADER_TIMEOUT = 10.0


class HeadDeadline:
    """One connection's deadline for the request head it is reading; `expire` runs past it.

    One lazy timer per connection, not one per head: a head only notes when it began (the
    loop's clock), and its end only forgets that. The timer, armed by the first head that finds
    none, checks at its time whether the head being read then is past its own deadline: if so,
    `expire`; if a later head is being read, it re-arms at that head's deadline; if none is,
    it lapses (the next head arms it again). The same deadline per head; a kept-alive
    connection's requests no longer make and cancel a timer each (`call_later` and `cancel`,
    ~2 µs a request; a connection's first head arms one, and one fires per `seconds` while its
    heads keep coming)."""

    __slots__ = ("_began", "_expire", "_loop", "_seconds", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float,
                 expire: Callable[[], None]) -> None:
        self._loop = loop
        self._seconds = seconds
        self._expire = expire
        self._began: float | None = None  # when the head being read began; None: none is
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """A head's bytes: its deadline starts unless it runs already (a head's later bytes do
        not move it)."""
        if self._began is None:
            self._began = began = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(began + self._seconds, self._due)

    def stop(self) -> None:
        """The head is complete."""
        self._began = None

    def close(self) -> None:
        """The connection is gone: no check is left to run."""
        self._began = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        began = self._began
        if began is None:  # no head is being read: the next one arms the timer again
            return
        deadline = began + self._seconds
        if self._loop.time() < deadline:  # a later head than the one that armed it
            self._timer = self._loop.call_at(deadline, self._due)
            return
        self._began = None
        self._expire()


class H11HeadTimeout(H11Protocol):
    header_timeout: ClassVar[float] = DEFAULT_HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = HeadDeadline(self.loop, self.header_timeout, self._head_expired)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _idle_until_first_request(self)

    def data_received(self, data: bytes) -> None:
        # h11 reads a peer `IDLE` until a whole request head has arrived.
        if self.conn.their_state is h11.IDLE:
            self._head.start()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head.stop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head.close()
        super().connection_lost(exc)

    def _head_expired(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


class HttpToolsHeadTimeout(HttpToolsProtocol):
    header_timeout: ClassVar[float] = DEFAULT_HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = HeadDeadline(self.loop, self.header_timeout, self._head_expired)
        self._in_body = False  # from a head's end to its message's end (llhttp's callbacks)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _idle_until_first_request(self)

    def data_received(self, data: bytes) -> None:
        if not self._in_body:  # bytes of a head
            self._head.start()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head.stop()
        self._in_body = True
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not before and cycle is not None:  # a request's cycle, not an upgrade
            # Its response head leaves with its first body bytes, and the app's front may have
            # it made without a search per header (headwrite.py `quick_start`).
            cycle.transport = HeldHead(self.transport, cycle, self.loop)  # type: ignore[assignment]
            cycle.scope[QUICK_START] = quick_start  # type: ignore[literal-required]

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head.close()
        super().connection_lost(exc)

    def _head_expired(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


def _idle_until_first_request(protocol: H11Protocol | HttpToolsProtocol) -> None:
    """The keep-alive timer on a new connection (uvicorn arms it only after a response); the
    protocol's own `data_received` cancels it at the first byte."""
    protocol.timeout_keep_alive_task = protocol.loop.call_later(
        protocol.timeout_keep_alive, protocol.timeout_keep_alive_handler)


def protocol_for(http: str, seconds: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's `http` setting (`auto`, `httptools`, `h11`), with
    `seconds` as its head deadline."""
    if http == "h11":
        base: type[asyncio.Protocol] = H11HeadTimeout
    elif http in ("auto", "httptools"):  # auto: httptools, which the proxy requires (http1.py)
        base = HttpToolsHeadTimeout
    else:
        raise ValueError(f"no head deadline for uvicorn's http={http!r}")
    return type(base.__name__, (base,), {"header_timeout": seconds})
