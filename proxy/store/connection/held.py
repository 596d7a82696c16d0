"""`HeldConnection`: one pooled connection the script coalescer keeps (coalesce.py), its batches
written as they are made and their replies read into the callers' futures as they arrive.

Why: sending a batch the pooled way cost ~85 µs of proxy CPU per stored short answer (its
create and its final write, a batch each): a task per batch, a connection taken from the
blocking pool under a timeout (~19 µs) and given back (~5), then a `read_response` coroutine per
reply under its own `asyncio.timeout` (~27). Held, a batch is one `write` from the callback that
closes it, and its replies are parsed by hiredis (C) by a protocol of ours on the connection's
transport (the held connection itself, set with the transport's own `set_protocol`), in the
loop step that reads them: no coroutine, task, checkout or timer per reply, a deadline per
batch. (A reader task on the connection's stream did this before, a loop step later and one
more before the caller ran: ~25 Python calls per stored answer,
tests/integration/test_request_cost.py.) A loop whose transports refuse a new protocol
(rloop's) keeps the pooled way.

What redis-py did for these calls and still does: the connection is taken from the client's
pool (its address, authentication, TLS, database and, on Sentinel, the primary's address are
redis-py's); an error reply is that call's own, of redis-py's class for it (`parse_error`);
a reply of a `ConnectionError` class (LOADING: a restarting server) fails the connection, as
redis-py disconnects on it; the client's socket timeout bounds a batch's replies
(`rex.TimeoutError`, as redis-py raises). Otherwise:
- the connection lost (the server closed it, a reset, the pool disconnected it) fails every call
  still waiting with `rex.ConnectionError`, and the connection goes back to the pool (closed:
  redis-py reconnects it on its next use); the next batch takes a fresh one. A connection that
  closes while idle (a Redis restart) is noticed at once (its transport says so), so no
  call is sent on it;
- a READONLY reply (a primary Sentinel demoted) takes no more batches; its calls still out each get
  their own reply (on Sentinel's primary a `ConnectionError`, as redis-py's Sentinel connection
  raises), then it is closed: the next batch's fresh connection asks the sentinels again;
- a timed out batch fails every call still waiting (a reply read later would be another's).
No write waits for the socket's buffer to drain: what is buffered is bounded by the calls in
flight, each a request's create or final write.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import hiredis
from redis import exceptions as rex
from redis._parsers.base import BaseParser
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection

_NOT_ENOUGH = object()  # hiredis's answer while a reply is still incomplete
_EARLY = 0.001  # seconds a batch's deadline may be met early (`HeldConnection._watch`)


class _NoPush:  # hiredis before 3.2 has no type of its own for a push message
    pass


_PUSH: type = getattr(hiredis, "PushNotification", _NoPush)
_UNUSUAL = (BaseException, _PUSH)  # replies `_settle` looks at closer: errors, push messages


class Pending(Protocol):
    """A call written on the held connection: its reply goes to `reply`, unless its caller was
    cancelled meanwhile (then the reply is read and dropped). NOSCRIPT for a call sent the
    `first` time hands it back to be sent again (the script loaded); the second time it is the
    call's error."""

    @property
    def reply(self) -> asyncio.Future[Any]: ...

    @property
    def first(self) -> bool: ...


@dataclass(slots=True)
class _Batch:
    calls: Sequence[Pending]
    sent: float  # when it was written, on the loop's clock: its replies are due a timeout later
    next: int = 0  # the call whose reply is read next
    lost: list[Pending] = field(default_factory=list)  # NOSCRIPT: to load and send again


def holdable(connection: AbstractConnection) -> bool:
    """Whether its replies can be read here: a connected asyncio stream whose transport takes
    a protocol of ours (`HeldConnection`). The embedded store's fake connections keep the pooled
    path."""
    reader, writer = getattr(connection, "_reader", None), getattr(connection, "_writer", None)
    if not (isinstance(reader, asyncio.StreamReader) and isinstance(writer, asyncio.StreamWriter)):
        return False
    try:
        writer.transport.get_protocol()  # (a transport that has none cannot take ours)
    except NotImplementedError:
        return False
    return True


class HeldConnection(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool, connection: AbstractConnection,
                 on_retired: Callable[[HeldConnection], None],
                 on_noscript: Callable[[list[Pending]], None]) -> None:
        """`on_retired(self)`: this connection takes no more batches (lost, demoted, closing).
        `on_noscript(calls)`: the calls of a batch the server had lost the script of (nothing
        of them ran), to load it and send them again."""
        self._pool = pool
        self._connection = connection
        self._writer: asyncio.StreamWriter = connection._writer  # type: ignore[assignment]
        self._on_retired = on_retired
        self._on_noscript = on_noscript
        parser = getattr(connection, "_parser", None)
        options: dict[str, Any] = {
            "protocolError": rex.InvalidResponse,
            "replyError": getattr(parser, "parse_error", BaseParser.parse_error),
            "notEnoughData": _NOT_ENOUGH}
        encoder = connection.encoder
        if encoder.decode_responses:
            options.update(encoding=encoder.encoding, errors=encoder.encoding_errors)
        self._parser = hiredis.Reader(**options)
        self._timeout: float | None = connection.socket_timeout
        # On Sentinel's primary, redis-py turns READONLY into this (the primary was demoted).
        self._demoted: BaseException | None = None
        pool_of = getattr(connection, "connection_pool", None)
        if isinstance(connection, SentinelManagedConnection) and getattr(pool_of, "is_master",
                                                                         False):
            self._demoted = rex.ConnectionError("The previous master is now a slave")
        self._batches: collections.deque[_Batch] = collections.deque()
        # Takes batches: not lost, not closing, not on a demoted primary. An attribute read,
        # not a property (a Python call): the coalescer asks it twice per create and per final
        # write. Only `_retire` turns it off.
        self.usable = True
        # Its loop, kept: the loop a usable connection is used in (its streams are that loop's),
        # asked of asyncio once rather than per batch (a `getpid` system call each in 3.11).
        self.loop = asyncio.get_running_loop()
        # Replies are read by a protocol of ours on the connection's transport, each settled
        # in the loop step that reads it: a reader task awaiting the connection's stream woke
        # one step after the read and woke the caller one more (a loop step, the stream's read
        # coroutine and the task's wake-up per reply: ~15 Python calls, twice per stored
        # answer). Its connection's own protocol still hears of the connection's end and of
        # the write buffer's state (what its `close` and `drain` wait on).
        self._closed: asyncio.Future[None] = self.loop.create_future()
        self._watching: asyncio.TimerHandle | None = None  # `_watch`, while armed
        self._ending: asyncio.Task[None] | None = None
        transport = self._writer.transport
        self._own = transport.get_protocol()
        transport.set_protocol(self)  # last: NotImplementedError here leaves nothing changed

    @property
    def closed(self) -> asyncio.Future[None]:
        """Done once the connection went back to the pool."""
        return self._closed

    def send(self, data: list[bytes], calls: Sequence[Pending]) -> None:
        """Write one batch (`data`: its commands, packed) whose replies go to `calls`, in order.
        Only while `usable`. A transport that refuses the write is a lost connection."""
        try:
            self._writer.writelines(data)
        except Exception as exc:  # uvloop: RuntimeError on a closed transport
            failure = rex.ConnectionError(f"Error while writing to the store: {exc!r}")
            self._end(failure)
            raise failure from exc
        # One loop timer for the batches out, not one per batch (armed and cancelled per
        # create and per final write: a heap push and pop with their comparisons, ~10 Python
        # calls per stored answer): it looks at the oldest batch, the first due (`_watch`).
        now = self.loop.time()
        self._batches.append(_Batch(calls, now))
        if self._timeout is not None and self._watching is None:
            self._watching = self.loop.call_at(now + self._timeout, self._watch)

    async def aclose(self) -> None:
        """Take no more batches; wait for the replies of those out (each bounded by its
        deadline), then close and give the connection back."""
        self._retire()
        if not self._batches:
            self._end(rex.ConnectionError("Connection closed by the store."))
        await asyncio.shield(self._closed)

    # -- the transport's protocol: what it reads comes here; the connection's end goes to both
    # (the connection's own protocol resolves what its `close` waits on), the write buffer's
    # state to the connection's own protocol (its `drain`'s).

    def data_received(self, data: bytes) -> None:
        """Bytes read: every reply they complete, to its call."""
        if self._ending is not None:
            return  # ended: what comes after is no call's
        try:
            self._parser.feed(data)
            gets = self._parser.gets
            while (reply := gets()) is not _NOT_ENOUGH:
                if not self._settle(reply):
                    self._end(rex.ConnectionError("Connection closed by server."))
                    return
        except (rex.InvalidResponse, rex.ConnectionError) as exc:
            self._end(exc)

    def eof_received(self) -> bool | None:
        self._end(rex.ConnectionError("Connection closed by server."))
        own = self._own
        return own.eof_received() if isinstance(own, asyncio.Protocol) else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(rex.ConnectionError("Connection closed by server.") if exc is None else
                  rex.ConnectionError(f"Error while reading from the store: {exc!r}"))
        self._own.connection_lost(exc)

    def pause_writing(self) -> None:
        self._own.pause_writing()

    def resume_writing(self) -> None:
        self._own.resume_writing()

    def _end(self, failure: BaseException) -> None:
        """The connection is done (lost, timed out, retired and drained): every call still
        waiting fails with `failure`; it is closed and given back (once, in a context of its
        own: the giving back outlives the request whose batch took the connection)."""
        self._fail_all(failure)
        if self._ending is None:
            self._ending = self.loop.create_task(self._give_back(),
                                                 context=contextvars.Context())

    def _settle(self, reply: Any) -> bool:
        """One reply to its call; False when the connection must stop (no more replies wanted)."""
        # A script's usual reply (not an error, not a push) is told apart by one `isinstance`:
        # the error and push checks, a call each, then run for the unusual ones only (they were
        # six calls per reply, twelve per stored answer).
        usual = not isinstance(reply, _UNUSUAL)
        if not usual and isinstance(reply, _PUSH):
            # RESP3's out-of-band message (a server's maintenance notice; this connection
            # tracks and subscribes to nothing): no call's reply. redis-py acts on those of
            # the connections it reads itself: the next batch goes on a fresh one of them.
            self._retire()
            return bool(self._batches)
        if not self._batches:
            raise rex.InvalidResponse("A reply no call was waiting for")
        if not usual:
            if isinstance(reply, rex.ConnectionError):
                raise reply  # what redis-py raises (and disconnects on): LOADING and the like
        elif reply.__class__ is list and reply and isinstance(reply[0], rex.ConnectionError):
            raise reply[0]  # the same, first in an array (`__class__` read: no call)
        batch = self._batches[0]
        call = batch.calls[batch.next]
        batch.next += 1
        if usual:
            if not call.reply.done():  # else its caller was cancelled while the batch was out
                call.reply.set_result(reply)
        else:
            self._error_reply(batch, call, reply)
        if batch.next == len(batch.calls):
            self._batches.popleft()
            if batch.lost:
                self._on_noscript(batch.lost)
            if not self._batches and not self.usable:
                return False  # retired and drained: `data_received` ends the connection
        return True

    def _error_reply(self, batch: _Batch, call: Pending, reply: BaseException) -> None:
        """An error as a call's reply: NOSCRIPT the first time hands the call back to be sent
        again; READONLY retires the connection (a demoted primary)."""
        if isinstance(reply, rex.NoScriptError) and call.first:
            batch.lost.append(call)
        elif not call.reply.done():  # else its caller was cancelled while the batch was out
            if isinstance(reply, rex.ReadOnlyError):
                self._retire()
                if self._demoted is not None:
                    reply = self._demoted
            call.reply.set_exception(reply)

    def _watch(self) -> None:
        """The oldest batch out is due now, or later (its elders were answered): fail it, or
        look again when it is due. Not armed again with no batch out."""
        self._watching = None
        if not self._batches or self._timeout is None:
            return
        due = self._batches[0].sent + self._timeout
        # (A loop's timer may run a little early, uvloop's by up to its millisecond: then
        # due now, not looked at again and again until the clock gets there.)
        if self.loop.time() + _EARLY >= due:
            self._expired()
        else:
            self._watching = self.loop.call_at(due, self._watch)

    def _expired(self) -> None:
        """The oldest batch's replies did not come within the socket timeout."""
        self._end(rex.TimeoutError(f"Timeout reading from {_address(self._connection)}"))

    def _retire(self) -> None:
        if self.usable:
            self.usable = False
            self._on_retired(self)

    def _fail_all(self, failure: BaseException) -> None:
        self._retire()
        batches, self._batches = self._batches, collections.deque()
        if self._watching is not None:
            self._watching.cancel()
            self._watching = None
        for batch in batches:
            for call in (*batch.calls[batch.next:], *batch.lost):
                if not call.reply.done():
                    call.reply.set_exception(failure)

    async def _give_back(self) -> None:
        # Closed first: a reply left unread would be the next command's on this connection.
        try:
            try:
                await self._connection.disconnect()
            finally:
                await self._pool.release(self._connection)
        finally:
            if not self._closed.done():
                self._closed.set_result(None)


def _address(connection: AbstractConnection) -> str:
    host_error = getattr(connection, "_host_error", None)
    return str(host_error()) if callable(host_error) else "the store"
