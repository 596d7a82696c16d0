"""The pool of HTTP/1.1 connections to the upstreams (`http1.Connection`), and the exchange.

Invariants:
- No operation scans connections: idle connections sit in a LIFO per origin (the warmest socket
  first) and in one process-wide list oldest first (for expiry and for eviction); both are
  `OrderedDict`s, so a connection the server closes while idle leaves them in O(1) too. Handing
  a freed slot to a waiter looks at the head of each origin's queue: O(origins), never
  O(connections).
- At most `max_connections` open (or opening) at once, and at most `max_per_origin` to any one
  origin, so one hung replica cannot hold every slot; at most `max_idle_per_origin` idle per
  origin (past that the oldest idle one is closed). A request that finds its slots taken first
  evicts the oldest idle connection of another origin; otherwise it waits, up to its connect
  timeout, then fails with `PoolTimeout` (an overload of the proxy is an error the client sees,
  not an unbounded queue).
- Waiters are served first come, first served: each holds a ticket; a connection coming back
  is handed straight to the oldest waiter that can use it (same origin), and a freed slot is
  reserved for the oldest waiter whose origin is under its cap, before any newcomer can take
  it. A newcomer never jumps a queue (it waits whenever its origin has waiters, or the pool is
  full).
- A wake-up is never lost: a waiter whose timeout fires in the same loop step as it is handed a
  connection or a slot takes it (it was served in time); one cancelled after being served gives
  it back, which serves the next waiter.
- The loop's clock and timers are read through the connection's own `loop`: Python 3.11's
  `asyncio.get_running_loop()` is a `getpid` system call each time, and an exchange read it
  three times (sent, taken idle, released; ~0.5 µs each).
- Idle connections expire after `idle_expiry` seconds (4 s: below the 5 s after which uvicorn,
  and so vLLM, closes an idle keep-alive connection, so we rarely write to a socket the server is
  closing). One timer serves the whole pool: it fires at the oldest idle connection's expiry.
- A connection goes back only from `Response.close()` and only when reusable (the response was
  parsed to its end, keep-alive allowed, no error).
- Retries: a request that fails on a *reused* connection before any response byte arrived (the
  server closed it while idle) is sent again once on a fresh connection only when that cannot
  run it twice: the request is idempotent (GET), or it provably never left us (the connection
  was found closed before writing). A POST that may have reached the server is never re-sent:
  for vLLM that would be a second generation. The fleet retries a refused connection on another
  replica.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.upstream.dial import Proxy, connect
from proxy.upstream.http1 import (
    Connection,
    ExchangeTimeouts,
    Origin,
    PoolTimeout,
    ReadError,
    Response,
)

# Idle keep-alive connections are closed after this many seconds (uvicorn's default keep-alive
# is 5 s; we must let go first).
IDLE_EXPIRY = 4.0


class _NotSent(ReadError):
    """The connection was closed before the request was written: safe to send elsewhere."""


@dataclass(eq=False)
class _Waiter:
    ticket: int
    # A `Connection` handed over (same origin, idle), or None: a slot reserved for a new one.
    future: asyncio.Future[Connection | None]


@dataclass(eq=False)
class _OriginState:
    idle: OrderedDict[Connection, None] = field(default_factory=OrderedDict)  # newest last
    open: int = 0  # open or being opened, counted against `max_per_origin`
    waiters: deque[_Waiter] = field(default_factory=deque)

    def head(self) -> _Waiter | None:
        """The oldest waiter still waiting (those that gave up are dropped here)."""
        waiters = self.waiters
        while waiters and waiters[0].future.done():
            waiters.popleft()
        return waiters[0] if waiters else None


class ConnectionPool:
    def __init__(self, *, max_connections: int = 2048, max_per_origin: int | None = None,
                 max_idle_per_origin: int = 512, idle_expiry: float = IDLE_EXPIRY,
                 ssl_context: ssl.SSLContext | None = None,
                 proxy_for: Callable[[Origin], Proxy | None] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_origin = max_per_origin or max_connections
        self.max_idle_per_origin = max_idle_per_origin
        self.idle_expiry = idle_expiry
        self.open_connections = 0  # open or being opened: what `max_connections` bounds
        self._origins: dict[Origin, _OriginState] = {}
        self._oldest: OrderedDict[Connection, None] = OrderedDict()  # every idle one, oldest first
        self._tickets = itertools.count()
        self._sweeper: asyncio.TimerHandle | None = None
        self._ssl = ssl_context  # made on the first https connection when not given
        self._proxy_for = proxy_for
        self._closed = False

    def idle_connections(self, origin: Origin | None = None) -> int:
        if origin is None:
            return len(self._oldest)
        state = self._origins.get(origin)
        return len(state.idle) if state is not None else 0

    def waiting(self) -> int:
        """Requests waiting for a connection (for tests and metrics)."""
        return sum(1 for s in self._origins.values() for w in s.waiters if not w.future.done())

    # -- the exchange -------------------------------------------------------------------------
    async def request(self, origin: Origin, data: bytes, timeouts: ExchangeTimeouts, *,
                      idempotent: bool = False) -> Response:
        """Send `data` (a whole request) and return the response once its headers arrived.
        `idempotent`: the request may be sent again when a reused connection fails before any
        response byte (see the module docstring)."""
        # An idle connection nobody queues for, taken without the coroutine of `_acquire`
        # (which finds the same first): the common case of a warm pool.
        conn = self._idle_now(origin) or await self._acquire(origin, timeouts.connect)
        try:
            return await self._exchange(conn, data, timeouts)
        except _NotSent:
            pass
        except ReadError:
            if not (idempotent and conn.reused and conn.received_nothing):
                raise
        conn = await self._acquire(origin, timeouts.connect, fresh=True)
        return await self._exchange(conn, data, timeouts)

    async def _exchange(self, conn: Connection, data: bytes,
                        timeouts: ExchangeTimeouts) -> Response:
        try:
            try:
                conn.send(data)
            except ReadError as exc:
                raise _NotSent(str(exc)) from exc
            sent = conn.loop.time()
            deadline = sent + timeouts.response
            status, headers = await conn.read_head(deadline)
        except BaseException:
            conn.abort()  # cancelled or failed: whatever the server got, it must see us go
            raise
        first = None if timeouts.first is None else sent + timeouts.first
        return Response(conn, status, headers, release=self._release,
                        read_timeout=timeouts.read, deadline=deadline, first_deadline=first)

    # -- getting a connection ----------------------------------------------------------------
    def _state(self, origin: Origin) -> _OriginState:
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _OriginState()
        return state

    def _idle_now(self, origin: Origin) -> Connection | None:
        """`_acquire`'s first answer when it is an idle connection: no waiter is ahead of us
        and one is idle for `origin`."""
        state = self._origins.get(origin)
        if state is None or not state.idle or state.head() is not None or \
                self._blocked_by_others():
            return None
        return self._take_idle(state)

    async def _acquire(self, origin: Origin, connect_timeout: float, *,
                       fresh: bool = False) -> Connection:
        state = self._state(origin)
        if state.head() is None and not self._blocked_by_others():
            if not fresh:
                conn = self._take_idle(state)
                if conn is not None:
                    return conn
            if self._reserve(origin, state):
                return await self._open(origin, state, connect_timeout)
        got = await self._wait(state, connect_timeout)
        if got is not None:
            return got
        return await self._open(origin, state, connect_timeout)  # a slot was reserved for us

    def _blocked_by_others(self) -> bool:
        """Whether the pool is full and others queue for a slot (waiters whose own origin is
        under its cap): a newcomer must queue behind them. Waiters held by their origin's cap
        wait for that origin only, and block nobody else."""
        return self.open_connections >= self.max_connections and any(
            s.open < self.max_per_origin and s.head() is not None
            for s in self._origins.values())

    def _reserve(self, origin: Origin, state: _OriginState) -> bool:
        """Count a new connection to `origin` if its cap and the pool's allow (closing the
        oldest idle connection of any origin when only the pool is full)."""
        if state.open >= self.max_per_origin:
            return False
        if self.open_connections >= self.max_connections and not self._evict_oldest():
            return False
        state.open += 1
        self.open_connections += 1
        return True

    async def _wait(self, state: _OriginState, timeout: float) -> Connection | None:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(next(self._tickets), loop.create_future())
        state.waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # served in the step the timeout fired: take it
            raise PoolTimeout(f"no upstream connection free within {timeout:g} s "
                              f"({self.max_connections} in all, {self.max_per_origin} per "
                              "upstream)") from None
        except BaseException:
            # Served and cancelled at once: give back what we were given, or it stays unused.
            if waiter.future.done() and not waiter.future.cancelled():
                self._give_back(waiter.future.result(), state)
            raise

    def _give_back(self, got: Connection | None, state: _OriginState) -> None:
        if got is not None:
            self._release(got)
        else:
            state.open -= 1
            self.open_connections -= 1
            self._serve_waiters()

    def _take_idle(self, state: _OriginState) -> Connection | None:
        idle = state.idle
        while idle:
            conn, _ = idle.popitem()  # the newest
            del self._oldest[conn]
            if conn.loop.time() - conn.idle_since < self.idle_expiry:
                conn.reused = True
                return conn
            # The sweeper is late (a busy loop): expired. Its slot is freed here, without
            # serving waiters from inside this call (our callers do that next).
            conn.on_close = None
            state.open -= 1
            self.open_connections -= 1
            conn.close()
        return None

    def _evict_oldest(self) -> bool:
        """Close the oldest idle connection (any origin) to free a slot; False if none."""
        if not self._oldest:
            return False
        conn, _ = self._oldest.popitem(last=False)
        self._origins[conn.origin].idle.pop(conn, None)
        conn.on_close = None  # its slot is taken over by the caller, not freed
        self._origins[conn.origin].open -= 1
        self.open_connections -= 1
        conn.close()
        return True

    async def _open(self, origin: Origin, state: _OriginState, timeout: float) -> Connection:
        """A new connection, its slot already counted."""
        try:
            if origin[0] == "https" and self._ssl is None:
                self._ssl = ssl.create_default_context()  # loads the CA store: once
            proxy = self._proxy_for(origin) if self._proxy_for is not None else None
            conn = await connect(origin, timeout=timeout, ssl_context=self._ssl, proxy=proxy)
        except BaseException:
            self._slot_freed(state)
            raise
        if conn.closed:  # lost between the handshake and now (its on_close was not set yet)
            self._slot_freed(state)
        else:
            conn.on_close = self._forget
        return conn

    # -- connections coming back or going away --------------------------------------------------
    def _release(self, conn: Connection) -> None:
        """From `Response.close()`, for a reusable connection: hand it to the oldest waiter for
        its origin, or keep it idle, or close it."""
        if self._closed:
            conn.close()
            return
        conn.park()
        state = self._origins[conn.origin]
        head = state.head()
        if head is not None and not self._older_waiter_elsewhere(head, conn.origin):
            state.waiters.popleft()
            conn.reused = True
            head.future.set_result(conn)
            return
        idle = state.idle
        if len(idle) >= self.max_idle_per_origin:
            oldest, _ = idle.popitem(last=False)
            del self._oldest[oldest]
            oldest.close()
        conn.idle_since = conn.loop.time()
        idle[conn] = None
        self._oldest[conn] = None
        if self._sweeper is None:
            self._arm_sweeper()
        self._serve_waiters()  # an older waiter elsewhere may evict it for a slot

    def _older_waiter_elsewhere(self, head: _Waiter, origin: Origin) -> bool:
        """Whether a waiter older than `head` waits for another origin and could open a
        connection if this one's slot were freed (FIFO across origins)."""
        for other, state in self._origins.items():
            if other == origin or state.open >= self.max_per_origin:
                continue
            first = state.head()
            if first is not None and first.ticket < head.ticket:
                return True
        return False

    def _forget(self, conn: Connection) -> None:
        """A counted connection died (our close or the server's): free its slot."""
        if self._oldest.pop(conn, 0) is None:  # it was idle
            self._origins[conn.origin].idle.pop(conn, None)
        self._slot_freed(self._origins[conn.origin])

    def _slot_freed(self, state: _OriginState) -> None:
        state.open -= 1
        self.open_connections -= 1
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        """Reserve free slots for the oldest waiters whose origin is under its cap (evicting
        idle connections of other origins when the pool is full)."""
        while True:
            best: tuple[Origin, _OriginState, _Waiter] | None = None
            for origin, state in self._origins.items():
                head = state.head()
                if head is not None and state.open < self.max_per_origin and (
                        best is None or head.ticket < best[2].ticket):
                    best = (origin, state, head)
            if best is None:
                return
            origin, state, head = best
            conn = self._take_idle(state)
            if conn is not None:
                state.waiters.popleft()
                head.future.set_result(conn)
                continue
            if not self._reserve(origin, state):
                return
            state.waiters.popleft()
            head.future.set_result(None)

    # -- expiry ----------------------------------------------------------------------------------
    def _arm_sweeper(self) -> None:
        if self._oldest:
            oldest = next(iter(self._oldest))
            self._sweeper = oldest.loop.call_at(
                oldest.idle_since + self.idle_expiry, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        oldest = self._oldest
        while oldest:
            conn = next(iter(oldest))
            if now - conn.idle_since < self.idle_expiry:
                break
            del oldest[conn]
            self._origins[conn.origin].idle.pop(conn, None)
            conn.close()
        self._arm_sweeper()

    async def aclose(self) -> None:
        """Close the idle connections; from now on, connections that come back are closed.
        Responses still open close their own."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        while self._oldest:
            conn, _ = self._oldest.popitem(last=False)
            self._origins[conn.origin].idle.pop(conn, None)
            conn.close()
