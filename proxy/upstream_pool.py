"""The pool of HTTP/1.1 connections to the upstreams (`http1.Connection`), and the exchange.

Invariants:
- Every operation is O(1) in the number of connections: idle connections sit in a LIFO per
  origin (the warmest socket first) and in one process-wide list oldest first (for expiry and
  for eviction); both are `OrderedDict`s, so a connection the server closes while idle leaves
  them in O(1) too. Nothing scans all connections per request.
- At most `max_connections` open (or opening) at once, at most `max_idle_per_origin` idle per
  origin (past that the oldest idle one is closed). A request that finds every slot taken first
  evicts the oldest idle connection of any origin; when none is idle it waits, first come first
  served, up to its connect timeout for a slot, then fails with `PoolTimeout` (an overload of the
  proxy is an error the client sees, not an unbounded queue).
- Idle connections expire after `idle_expiry` seconds (4 s: below the 5 s after which uvicorn,
  and so vLLM, closes an idle keep-alive connection, so we rarely write to a socket the server is
  closing). One timer serves the whole pool: it fires at the oldest idle connection's expiry.
- A connection goes back only from `Response.close()` and only when reusable (the response was
  parsed to its end, keep-alive allowed, no error).
- A request that fails on a *reused* connection before any response byte arrived (the server
  closed it while idle, so nothing ran) is retried once on a fresh connection. Nothing else is
  retried here: the fleet retries a refused connection on another replica.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict, deque

from proxy.http1 import (
    Connection,
    ExchangeTimeouts,
    Origin,
    PoolTimeout,
    ReadError,
    Response,
    connect,
)

# Idle keep-alive connections are closed after this many seconds (uvicorn's default keep-alive
# is 5 s; we must let go first).
IDLE_EXPIRY = 4.0


class ConnectionPool:
    def __init__(self, *, max_connections: int = 2048, max_idle_per_origin: int = 512,
                 idle_expiry: float = IDLE_EXPIRY) -> None:
        self.max_connections = max_connections
        self.max_idle_per_origin = max_idle_per_origin
        self.idle_expiry = idle_expiry
        self.open_connections = 0  # open or being opened: what `max_connections` bounds
        self._idle: dict[Origin, OrderedDict[Connection, None]] = {}  # newest last
        self._oldest: OrderedDict[Connection, None] = OrderedDict()  # every idle one, oldest first
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    def idle_connections(self, origin: Origin | None = None) -> int:
        if origin is None:
            return len(self._oldest)
        return len(self._idle.get(origin, ()))

    # -- the exchange -------------------------------------------------------------------------
    async def request(self, origin: Origin, data: bytes, timeouts: ExchangeTimeouts) -> Response:
        """Send `data` (a whole request) and return the response once its headers arrived."""
        conn = await self._acquire(origin, timeouts.connect)
        try:
            return await self._exchange(conn, data, timeouts)
        except ReadError:
            if not (conn.reused and conn.received_nothing):
                raise
        # The server had closed the idle connection: the request never ran. Once, on a new one.
        conn = await self._acquire(origin, timeouts.connect, fresh=True)
        return await self._exchange(conn, data, timeouts)

    async def _exchange(self, conn: Connection, data: bytes,
                        timeouts: ExchangeTimeouts) -> Response:
        try:
            conn.send(data)
            sent = asyncio.get_running_loop().time()
            deadline = sent + timeouts.response
            status, headers = await conn.read_head(deadline)
        except BaseException:
            conn.abort()  # cancelled or failed: whatever the server got, it must see us go
            raise
        first = None if timeouts.first is None else sent + timeouts.first
        return Response(conn, status, headers, release=self._release,
                        read_timeout=timeouts.read, deadline=deadline, first_deadline=first)

    # -- getting a connection ----------------------------------------------------------------
    async def _acquire(self, origin: Origin, connect_timeout: float, *,
                       fresh: bool = False) -> Connection:
        deadline: float | None = None
        while True:
            if not fresh:
                conn = self._take_idle(origin)
                if conn is not None:
                    return conn
            if self.open_connections < self.max_connections or self._evict_oldest():
                return await self._open(origin, connect_timeout)
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + connect_timeout
            await self._wait_for_slot(deadline)

    def _take_idle(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        conn, _ = idle.popitem()  # the newest
        del self._oldest[conn]
        if asyncio.get_running_loop().time() - conn.idle_since < self.idle_expiry:
            conn.reused = True
            return conn
        # The sweeper is late (a busy loop). The newest expired, so have all older ones.
        conn.close()
        while idle:
            older, _ = idle.popitem()
            del self._oldest[older]
            older.close()
        return None

    def _evict_oldest(self) -> bool:
        """Close the oldest idle connection (any origin) to free a slot; False if none."""
        if not self._oldest:
            return False
        conn, _ = self._oldest.popitem(last=False)
        self._idle[conn.origin].pop(conn, None)
        conn.close()
        return True

    async def _open(self, origin: Origin, timeout: float) -> Connection:
        self.open_connections += 1
        try:
            if origin[0] == "https" and self._ssl is None:
                self._ssl = ssl.create_default_context()  # loads the CA store: once
            conn = await connect(origin, timeout=timeout, ssl_context=self._ssl)
        except BaseException:
            self._slot_freed()
            raise
        if conn.closed:  # lost between the handshake and now (its on_close was not set yet)
            self._slot_freed()
        else:
            conn.on_close = self._forget
        return conn

    async def _wait_for_slot(self, deadline: float) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            raise PoolTimeout(f"all {self.max_connections} upstream connections are busy") \
                from None
        except BaseException:
            # Woken and cancelled at once: hand the wake-up on, or a slot stays unnoticed.
            if waiter.done() and not waiter.cancelled():
                self._wake_one()
            raise

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # a waiter that gave up is cancelled: skip it
                waiter.set_result(None)
                return

    # -- connections coming back or going away --------------------------------------------------
    def _release(self, conn: Connection) -> None:
        """From `Response.close()`, for a reusable connection: keep it idle, or close it."""
        if self._closed:
            conn.close()
            return
        conn.park()
        idle = self._idle.get(conn.origin)
        if idle is None:
            idle = self._idle[conn.origin] = OrderedDict()
        if len(idle) >= self.max_idle_per_origin:
            oldest, _ = idle.popitem(last=False)
            del self._oldest[oldest]
            oldest.close()
        conn.idle_since = asyncio.get_running_loop().time()
        idle[conn] = None
        self._oldest[conn] = None
        if self._sweeper is None:
            self._arm_sweeper()
        if self._waiters:
            self._wake_one()  # for its origin it takes this one; for another it evicts one

    def _forget(self, conn: Connection) -> None:
        """A counted connection died (our close or the server's): free its slot."""
        if self._oldest.pop(conn, 0) is None:  # it was idle
            self._idle[conn.origin].pop(conn, None)
        self._slot_freed()

    def _slot_freed(self) -> None:
        self.open_connections -= 1
        if self._waiters:
            self._wake_one()

    # -- expiry ----------------------------------------------------------------------------------
    def _arm_sweeper(self) -> None:
        if self._oldest:
            oldest = next(iter(self._oldest))
            self._sweeper = asyncio.get_running_loop().call_at(
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
            self._idle[conn.origin].pop(conn, None)
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
            self._idle[conn.origin].pop(conn, None)
            conn.close()
