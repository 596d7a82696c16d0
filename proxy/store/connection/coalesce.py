"""Script calls made in the same loop turn, sent together as one pipeline (one primary only).

Why: redis-py spends about 65-75 µs of Python on a lone command (a connection taken from the
blocking pool under a timeout, the retry wrapper, the reply parsed and the connection given
back) and 20-28 µs on each command of a pipeline of 16-256 (`python -m bench.scriptcalls`;
docs/benchmarks-history.md, "A burst's set-up, and coalesced script calls"). A burst's
creates, and the final writes of streams that end together, each paid the lone price on the
one core that also sets up the next request. Here the calls of one loop turn share one
pipeline: the first call of a batch schedules its sending (`loop.call_soon`, so it goes out
once the callbacks already ready have run: no timer, no added wait beyond that turn), and every
caller awaits its own reply.

What does not change: each call is its own EVALSHA, run by Redis on its own (a pipeline is not a
transaction: one call's error is that call's alone); a script the server lost (a restart emptied
its cache) is loaded and its calls sent again, as redis-py's Script does; a pipeline that fails
as a whole (the connection lost, a timeout) fails each of its calls with that error, which the
caller maps as before (store/connection/failures.py `store_errors`, `raise_mapped`). A call
whose caller was cancelled before its batch went out is left out of it (as a lone call cancelled
before its send was never sent); once sent, it lands or not as a lone call would. A batch of one
goes the same way, as a pipeline of one.

How a batch goes out: on a connection the coalescer holds (store/connection/held.py), written
from the callback that closes the batch, its replies read as they come into the callers'
futures; the first batch, and the first after that connection was lost or retired, waits for a
fresh one from the client's pool. A client whose connections cannot be held (the embedded
store's fake ones) sends each batch the pooled way: a task, a pooled connection, its
replies read in order. Either way the send runs in the first caller's context (`call_soon`
carries it): the round trips a request causes are still counted against it
(tests/integration/test_create_round_trips.py). The cluster and `--redis-wait-replicas` keep
their own paths (store/redis.py `_waited`): a cluster routes each call to its slot's node, and
WAIT counts the writes of the connection it is sent on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import hiredis
from redis import exceptions as rex
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from proxy.store.connection.held import HeldConnection, Pending, holdable


class _Call:
    """One script call of a batch. A class of slots with its own `__init__`, not a frozen
    dataclass: that one's `__init__` sets each field through `object.__setattr__` (0.67 against
    0.15 µs, once per create, final write and flush)."""

    __slots__ = ("args", "first", "keys", "reply", "script")

    def __init__(self, script: AsyncScript, keys: list[Any], args: list[Any],
                 reply: asyncio.Future[Any], first: bool = True) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.reply = reply
        self.first = first  # False once sent again after NOSCRIPT (the script loaded)


class ScriptCoalescer:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._batch: list[_Call] = []
        self._held: HeldConnection | None = None  # takes batches while `usable`
        self._holding: set[HeldConnection] = set()  # not yet given back to the pool
        self._taking: asyncio.Future[HeldConnection | None] | None = None  # a fresh one
        self._pooled = False  # the client's connections cannot be held: every batch pooled
        self._sending: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)
        self.batches = 0  # sent, for tests and the bench: calls per batch = calls / batches
        self.calls = 0

    async def __call__(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        # The held connection's loop while it is usable (the loop we run in: its streams are
        # that loop's), else asyncio's: `get_running_loop` makes a `getpid` system call in 3.11,
        # and this runs for every create and final write.
        held = self._held
        loop = held.loop if held is not None and held.usable else asyncio.get_running_loop()
        call = _Call(script, keys, args, loop.create_future())
        if not self._batch:
            loop.call_soon(self._send_batch)
        self._batch.append(call)
        return await call.reply

    def _send_batch(self) -> None:
        batch, self._batch = self._batch, []
        match batch:  # a pattern, not `len`: a lone call (one request's create or final write)
            case [call]:  # is looked at without a list comprehension and its count
                if call.reply.done():
                    return
                live = batch
                self.calls += 1
            case _:
                live = [call for call in batch if not call.reply.done()]
                if not live:
                    return
                self.calls += len(live)
        self.batches += 1
        held = self._held
        if held is not None and held.usable:
            try:  # `_write`, inline: this runs for every create and final write
                held.send(_commands(live), live)
            except BaseException as exc:  # a value Redis cannot take, a closed transport
                _fail(live, exc)
        else:
            self._spawn(self._send_later(live))

    def _write(self, held: HeldConnection, calls: list[_Call]) -> None:
        """One batch written on the held connection (one round trip)."""
        try:
            held.send(_commands(calls), calls)
        except BaseException as exc:  # a value Redis cannot take, a closed transport
            _fail(calls, exc)

    def _spawn(self, sending: Any) -> None:
        task = asyncio.get_running_loop().create_task(sending)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_later(self, calls: list[_Call]) -> None:
        """A batch that waits for a connection to hold (or, not holdable, goes pooled)."""
        try:
            held = await self._connection()
        except BaseException as exc:
            _fail(calls, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        live = [call for call in calls if not call.reply.done()]  # cancelled while it waited
        if not live:
            return
        if held is None:
            await self._send(live)
        elif held.usable:
            self._write(held, live)
        else:  # lost as soon as taken: a server closing connections, not to be looped on
            _fail(live, rex.ConnectionError("Connection closed by server."))

    async def _connection(self) -> HeldConnection | None:
        """The held connection, a fresh one taken from the pool if there is none usable; None
        when the client's connections cannot be held."""
        if self._pooled:
            return None
        if self._held is not None and self._held.usable:
            return self._held
        if self._taking is None:
            self._taking = asyncio.ensure_future(self._take())
        taking = self._taking
        try:
            return await asyncio.shield(taking)
        finally:
            if self._taking is taking and taking.done():
                self._taking = None

    async def _take(self) -> HeldConnection | None:
        pool = self._client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        held: HeldConnection | None = None
        if holdable(connection):
            # A loop whose transports keep their protocol (rloop's) refuses the hold.
            with contextlib.suppress(NotImplementedError):
                held = HeldConnection(pool, connection, self._retire, self._noscript)
        if held is None:
            await pool.release(connection)
            self._pooled = True
            return None
        self._held = held
        self._holding.add(held)
        held.closed.add_done_callback(lambda _: self._holding.discard(held))
        return held

    def _retire(self, held: HeldConnection) -> None:
        """`held` takes no more batches (it closes itself once its replies are in)."""
        if self._held is held:
            self._held = None

    def _noscript(self, calls: list[Pending]) -> None:
        lost = [call for call in calls if isinstance(call, _Call) and not call.reply.done()]
        if lost:
            self._spawn(self._load_and_resend(lost))

    async def _load_and_resend(self, lost: list[_Call]) -> None:
        """The server lost its script cache: nothing of these calls ran. Each script is loaded
        once and the calls sent again (redis-py's Script does the same for one)."""
        try:
            for source in {call.script.script for call in lost}:
                await self._client.script_load(source)
        except BaseException as exc:
            _fail(lost, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for call in lost:
            call.first = False  # sent again: a second NOSCRIPT is its error
        await self._send_later(lost)

    async def _send(self, batch: list[_Call]) -> None:
        """The pooled way (a client whose connections cannot be held)."""
        try:
            await self._run(batch)
        except BaseException as exc:  # a failed round trip fails every call still waiting
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
    async def _run(self, calls: list[_Call]) -> None:
        lost: list[_Call] = []
        for call, reply in zip(calls, await self._pipelined(calls), strict=True):
            if isinstance(reply, rex.NoScriptError):
                lost.append(call)
            else:
                _settle(call, reply)
        if lost:
            # The server lost its script cache: nothing of these calls ran. Each script is
            # loaded once and the calls sent again (redis-py's Script does the same for one).
            for source in {call.script.script for call in lost}:
                await self._client.script_load(source)
            for call, reply in zip(lost, await self._pipelined(lost), strict=True):
                _settle(call, reply)

    async def _pipelined(self, calls: list[_Call]) -> list[Any]:
        """Every call's EVALSHA written at once on one pooled connection, the replies read in
        order, an error reply that call's own: what redis-py's pipeline (or a lone command)
        does for them, without its per-command machinery (the command stack, the retry wrapper
        (no retries here: `Retry(NoBackoff(), 0)`), response callbacks, observability hooks):
        ~60 µs of Python per create or final write at a few streams. EVALSHA itself: a
        script's load is asked for only when the server says it lost it (`NoScriptError`)."""
        pool = self._client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.send_packed_command(_packed(calls))
            replies: list[Any] = []
            for _ in calls:
                try:
                    replies.append(await connection.read_response())
                except rex.ResponseError as exc:
                    replies.append(exc)
            return replies
        except BaseException:
            # A reply left unread would be the next command's on this connection: it is
            # closed (redis-py's reads close it too on a failure; this covers the write).
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)

    async def aclose(self) -> None:
        """Waits for the batches being sent (bounded by the client's socket timeout), then
        gives the held connection back."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        if self._taking is not None:
            await asyncio.gather(self._taking, return_exceptions=True)
        for held in list(self._holding):
            await held.aclose()


def _packed(calls: list[_Call]) -> bytes:
    """The calls' commands (`_commands`) as one string, for redis-py's connection."""
    return b"".join(_commands(calls))


def _commands(calls: list[_Call]) -> list[bytes]:
    """The calls' EVALSHA commands in Redis's protocol, packed by hiredis (C) as redis-py's own
    sync client does: its asyncio connection packs in Python, argument by argument, and a
    create's script call has twenty-odd (in a cProfile of stored short answers, packing was
    three fifths of the coalesced writes' time). The arguments go as they are: only a
    `bytearray` is refused by hiredis, and looking at each argument for one cost ~3.7 µs per
    create; it is converted when the packing says so. A value of a type Redis cannot take is
    redis-py's `DataError`, as it would have been. One string per call: the held connection
    writes them as they are (`writelines`: under uvloop one vectored write, where joining them
    first copied every byte of a batch's creates and final writes once more)."""
    pack = hiredis.pack_command
    try:
        match calls:  # a lone call (nearly always: one request's create or final write)
            case [call]:  # packed without a list comprehension's frame
                return [pack(("EVALSHA", call.script.sha, len(call.keys), *call.keys,
                              *call.args))]
        return [pack(("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args))
                for call in calls]
    except TypeError:
        pass
    return [pack_args(("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args))
            for call in calls]


def pack_args(args: tuple[Any, ...]) -> bytes:
    """One command in Redis's protocol, packed by hiredis, taking what redis-py's packing takes:
    a `bytearray` (which hiredis refuses) converted when the packing says so, a value Redis
    cannot take redis-py's `DataError`. The coalescer's own path above tries its calls as they
    are first; the cluster client's connections pack every command here
    (store/connection/factory.py `HiredisPackedConnection`)."""
    pack: Callable[[tuple[Any, ...]], bytes] = hiredis.pack_command
    try:
        return pack(args)
    except TypeError:
        pass
    try:
        return pack(tuple(bytes(a) if isinstance(a, bytearray) else a for a in args))
    except TypeError as exc:
        raise rex.DataError(str(exc)) from exc


def _fail(calls: list[_Call], exc: BaseException) -> None:
    for call in calls:
        if call.reply.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            call.reply.cancel()
        else:
            call.reply.set_exception(exc)


def _settle(call: _Call, reply: Any) -> None:
    if call.reply.done():  # its caller was cancelled while the batch was out
        return
    if isinstance(reply, BaseException):
        call.reply.set_exception(reply)
    else:
        call.reply.set_result(reply)
