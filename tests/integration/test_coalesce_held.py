"""The script coalescer's held connection (store/connection/held.py): its batches share one
connection taken once from the client's pool, and what happens to them when that connection
fails. Against the session's redis-server and, for failures a real server will not produce on
demand (a batch never answered, a connection closed mid-batch, a READONLY primary), a scripted
RESP server in the test's loop. What each asserts is an outcome (which error, which
connection), never a duration."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import hiredis
import pytest
from redis import exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.backoff import NoBackoff

from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.coalesce import ScriptCoalescer
from proxy.store.connection.factory import open_store
from proxy.store.connection.held import HeldConnection
from tests.support.servers import ServerProcess
from tests.support.spies import timers_armed

ECHO = "return ARGV[1]"
SETTLE_STEPS = 200  # loop turns (of 5 ms at most) for the reader to see a closed connection


def counted_checkouts(client: Redis, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    taken = [0]
    pool = client.connection_pool
    get = pool.get_connection

    async def counted(*args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return await get(*args, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(pool, "get_connection", counted)
    return taken


async def test_batches_share_one_connection_taken_once(
        redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Redis(port=redis_server.port)
    await client.script_load(ECHO)  # (else its first call's NOSCRIPT has it loaded, pooled)
    taken = counted_checkouts(client, monkeypatch)
    coalescer = ScriptCoalescer(client)
    script = client.register_script(ECHO)
    try:
        for n in range(5):  # five batches, one after the other
            assert await coalescer(script, [], [str(n)]) == str(n).encode()
        assert await asyncio.gather(*(coalescer(script, [], [str(n)]) for n in range(3))) == \
            [b"0", b"1", b"2"]
        assert (coalescer.batches, taken[0]) == (6, 1)
    finally:
        await coalescer.aclose()
        await client.aclose()
    # Given back on close: the pool holds it again, closed.
    assert len(client.connection_pool._in_use_connections) == 0


async def test_a_connection_the_server_closed_while_idle_is_replaced_before_the_next_batch(
        redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Redis(port=redis_server.port)
    # Loaded here, not left to an earlier test of the session's server (another file flushes
    # its script cache, and under `-n 2` the test that loads it may run on the other worker):
    # else the first call's NOSCRIPT has it loaded on a pooled connection, a checkout more.
    await client.script_load(ECHO)
    taken = counted_checkouts(client, monkeypatch)
    coalescer = ScriptCoalescer(client)
    script = client.register_script(ECHO)
    try:
        assert await coalescer(script, [], ["before"]) == b"before"
        assert taken[0] == 1
        held = coalescer._held
        assert held is not None
        async with Redis(port=redis_server.port) as admin:
            await admin.client_kill_filter(_type="normal", skipme=True)
        await settled(lambda: not held.usable)
        # Noticed by the reader while idle: the next batch is not sent on the dead connection.
        assert await coalescer(script, [], ["after"]) == b"after"
        assert taken[0] == 2 and coalescer._held is not held
    finally:
        await coalescer.aclose()
        await client.aclose()


async def settled(done: Callable[[], bool]) -> None:
    for _ in range(SETTLE_STEPS):
        if done():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not settled")


# -- a scripted server --------------------------------------------------------------------------

Answer = Callable[[int, list[bytes]], bytes | None]  # (connection number, command) -> reply


class ScriptedRedis:
    """Answers the connection handshake with +OK and every EVALSHA as `answer` says: bytes to
    send, None to say nothing, b"" to close the connection."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    reply = self.answer(number, command) if command[0].upper() == b"EVALSHA" \
                        else b"+OK\r\n"
                    if reply == b"":
                        return
                    if reply is not None:
                        writer.write(reply)
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def scripted(answer: Answer, socket_timeout: float = 5.0
                   ) -> AsyncIterator[tuple[ScriptedRedis, ScriptCoalescer, Any]]:
    fake = ScriptedRedis(answer)
    fake.server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    client = Redis(port=fake.port, socket_timeout=socket_timeout, retry=Retry(NoBackoff(), 0))
    coalescer = ScriptCoalescer(client)
    try:
        yield fake, coalescer, client.register_script(ECHO)
    finally:
        await coalescer.aclose()
        await client.aclose()
        fake.server.close()


def bulk(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


async def test_a_reply_settles_its_call_in_the_loop_step_that_reads_it() -> None:
    # Read by a protocol of ours on the connection's transport: the caller's future is done
    # as the bytes are handed over, with no reader task to wake a step later (what it cost:
    # a loop step, the stream's read and a task's wake-up per reply).
    async with scripted(lambda _connection, _command: None) as (fake, coalescer, script):
        waiting = asyncio.ensure_future(coalescer(script, [], [b"x"]))
        # The batch is counted when it leaves for a connection, and out on the held one only
        # once that connection is made: waited for, not assumed (a loaded machine took longer
        # than one settling step to connect).
        await settled(lambda: coalescer._held is not None and bool(coalescer._held._batches))
        held = coalescer._held
        assert held is not None and coalescer.batches == 1
        (batch,) = held._batches
        (call,) = batch.calls
        transport = held._writer.transport
        transport.get_protocol().data_received(bulk(b"x")[:3])  # a reply in two reads
        assert not call.reply.done()
        transport.get_protocol().data_received(bulk(b"x")[3:])
        assert call.reply.done() and not held._batches
        assert await waiting == b"x"
        assert fake.connections == 1


async def test_a_batch_unanswered_within_the_socket_timeout_fails_and_the_next_goes_fresh(
        ) -> None:
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        return None if connection == 1 else bulk(command[-1])

    async with scripted(answer, socket_timeout=0.2) as (fake, coalescer, script):
        outcomes = await asyncio.gather(*(coalescer(script, [], [b"x%d" % n]) for n in range(3)),
                                        return_exceptions=True)
        assert all(isinstance(o, rex.TimeoutError) for o in outcomes), outcomes
        assert await coalescer(script, [], [b"next"]) == b"next"
        assert fake.connections == 2


async def test_one_timer_watches_the_batches_out_each_failed_at_its_own_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One loop timer for every batch out (not one armed and cancelled per batch): it fails a
    # batch no earlier than its own deadline, though it was armed for an earlier one.
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        return None if command[-1] == b"stuck" else bulk(command[-1])

    loop = asyncio.get_running_loop()
    timeout = 0.3
    async with scripted(answer, socket_timeout=timeout) as (fake, coalescer, script):
        assert await coalescer(script, [], [b"warm"]) == b"warm"  # the connection held
        armed = timers_armed(monkeypatch)
        for n in range(3):
            assert await coalescer(script, [], [b"%d" % n]) == b"%d" % n
        await asyncio.sleep(timeout / 2)
        sent = loop.time()
        with pytest.raises(rex.TimeoutError):
            await coalescer(script, [], [b"stuck"])
        assert loop.time() - sent >= timeout - 0.002  # its own deadline, not the first's
        monkeypatch.undo()
        assert await coalescer(script, [], [b"next"]) == b"next"
        # Armed once for the four batches (then again, at most, for the stuck one's deadline).
        assert 1 <= len(armed) <= 2, armed
        assert fake.connections == 2


async def test_a_connection_lost_mid_batch_fails_each_of_its_calls_and_the_next_goes_fresh(
        ) -> None:
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        if connection == 1:
            return bulk(command[-1]) if command[-1] == b"first" else b""
        return bulk(command[-1])

    async with scripted(answer) as (fake, coalescer, script):
        outcomes = await asyncio.gather(
            *(coalescer(script, [], [arg]) for arg in (b"first", b"second", b"third")),
            return_exceptions=True)
        # The first's reply came before the connection closed: it is its own.
        assert outcomes[0] == b"first"
        assert all(isinstance(o, rex.ConnectionError) for o in outcomes[1:]), outcomes
        assert await coalescer(script, [], [b"next"]) == b"next"
        assert fake.connections == 2


async def test_a_readonly_reply_is_that_calls_own_and_retires_the_connection() -> None:
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        if connection == 1 and command[-1] == b"demoted":
            return b"-READONLY You can't write against a read only replica.\r\n"
        return bulk(command[-1])

    async with scripted(answer) as (fake, coalescer, script):
        outcomes = await asyncio.gather(
            *(coalescer(script, [], [arg]) for arg in (b"before", b"demoted", b"after")),
            return_exceptions=True)
        assert outcomes[0] == b"before" and outcomes[2] == b"after"
        assert isinstance(outcomes[1], rex.ReadOnlyError), outcomes
        # The primary was demoted: the next batch asks the pool for a fresh connection.
        assert await coalescer(script, [], [b"next"]) == b"next"
        assert fake.connections == 2


async def test_a_loading_reply_alone_or_first_in_an_array_is_a_lost_connection() -> None:
    # What redis-py raises (and disconnects on) rather than return: a usual reply is told apart
    # from these by one check, and an array of one is still looked into.
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        if connection == 1:
            return b"-LOADING Redis is loading the dataset in memory\r\n"
        if connection == 2:
            return b"*2\r\n-LOADING Redis is loading the dataset in memory\r\n:1\r\n"
        return b"*2\r\n" + bulk(command[-1]) + b":1\r\n"

    async with scripted(answer) as (fake, coalescer, script):
        for arg in (b"alone", b"first"):
            outcomes = await asyncio.gather(coalescer(script, [], [arg]),
                                            coalescer(script, [], [b"next"]),
                                            return_exceptions=True)
            assert all(isinstance(o, rex.BusyLoadingError) for o in outcomes), outcomes
        assert await coalescer(script, [], [b"after"]) == [b"after", 1]
        assert fake.connections == 3


async def test_a_noscript_reply_loads_the_script_and_sends_the_call_again() -> None:
    loaded: list[int] = []

    def answer(connection: int, command: list[bytes]) -> bytes | None:
        if not loaded:
            loaded.append(connection)
            return b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        return bulk(command[-1])

    async with scripted(answer) as (fake, coalescer, script):
        assert await coalescer(script, [], [b"again"]) == b"again"
        assert fake.connections == 2  # the held one, and the pooled one SCRIPT LOAD took


class _Sentinels:
    """Sentinels that name the scripted server as the primary (what redis-py asks them)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked = 0

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        self.asked += 1
        return "127.0.0.1", self.port


async def test_on_sentinel_a_readonly_reply_is_a_lost_primary_and_the_next_batch_asks_again(
        ) -> None:
    """As redis-py's Sentinel connection says of a READONLY reply: the primary was demoted
    (a `ConnectionError`, so a 503 and the final write's retry); the next connection asks the
    sentinels for the primary again."""
    def answer(connection: int, command: list[bytes]) -> bytes | None:
        if connection == 1:
            return b"-READONLY You can't write against a read only replica.\r\n"
        return bulk(command[-1])

    fake = ScriptedRedis(answer)
    fake.server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    sentinels = _Sentinels(fake.port)
    pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
        "primary", sentinels, retry=Retry(NoBackoff(), 0))
    client = Redis(connection_pool=pool)
    coalescer = ScriptCoalescer(client)
    script = client.register_script(ECHO)
    try:
        with pytest.raises(rex.ConnectionError, match="master is now a slave"):
            await coalescer(script, [], [b"demoted"])
        asked = sentinels.asked
        assert await coalescer(script, [], [b"next"]) == b"next"
        assert fake.connections == 2 and sentinels.asked > asked
    finally:
        await coalescer.aclose()
        await client.aclose()
        fake.server.close()


async def test_a_transport_that_keeps_its_protocol_goes_pooled(
        redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop whose transports refuse `set_protocol` (rloop's: NotImplementedError) cannot
    have a connection held: the coalescer gives it back and sends every batch pooled (under
    granian on rloop every stored create was a 500)."""
    import asyncio.selector_events as selector_events

    transport = selector_events._SelectorSocketTransport
    own = transport.set_protocol

    def refused(self: Any, protocol: Any) -> None:  # (a transport sets its first one itself)
        if isinstance(protocol, HeldConnection):
            raise NotImplementedError("TCPTransport protocol cannot be changed")
        own(self, protocol)

    monkeypatch.setattr(transport, "set_protocol", refused)
    client = Redis(port=redis_server.port)
    await client.script_load(ECHO)
    coalescer = ScriptCoalescer(client)
    script = client.register_script(ECHO)
    try:
        assert await coalescer(script, [], ["a"]) == b"a"
        assert await asyncio.gather(*(coalescer(script, [], [str(n)]) for n in range(3))) == \
            [b"0", b"1", b"2"]
        assert coalescer._held is None and coalescer._pooled
    finally:
        await coalescer.aclose()
        await client.aclose()
    assert len(client.connection_pool._in_use_connections) == 0


async def test_the_event_log_flush_goes_on_the_held_connection(
        redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush's append, like a create and a final write: no pooled connection taken per
    flush (store/redis.py `_append_all`)."""
    store = open_store(f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        record = ResponseRecord({"id": "resp_held1", "status": "in_progress"}, "t", logged=True)
        await store.create_response(record, [], ttl=60, event_ttl=60)
        await store.append_events({"resp_held1": [StoredEvent(0, "t", b"{}")]}, ttl=60)  # warm
        taken = counted_checkouts(store.client, monkeypatch)
        for seq in range(1, 4):
            await store.append_events({"resp_held1": [StoredEvent(seq, "t", b"{}")]}, ttl=60)
        assert taken[0] == 0
        assert [e.seq for e in await store.read_events("resp_held1")] == [0, 1, 2, 3]
    finally:
        await store.aclose()


async def test_a_batch_goes_out_as_its_commands_not_copied_into_one_string(
        redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each call's packed command is handed to the transport as it is (one vectored write under
    # uvloop), where a batch was joined first: a copy of every byte of its creates and final
    # writes before the socket.
    client = Redis(port=redis_server.port)
    await client.script_load(ECHO)
    coalescer = ScriptCoalescer(client)
    script = client.register_script(ECHO)
    written: list[list[bytes]] = []
    try:
        assert await coalescer(script, [], ["warm"]) == b"warm"  # the held connection taken
        held = coalescer._held
        assert held is not None
        writer = held._writer
        writelines = writer.writelines

        def recorded(data: Any) -> None:
            written.append(list(data))
            writelines(data)

        monkeypatch.setattr(writer, "writelines", recorded)
        args = [b"x" * 1000, b"y" * 1000, b"z" * 1000]
        assert await asyncio.gather(*(coalescer(script, [], [a]) for a in args)) == args
        assert written == [[hiredis.pack_command(("EVALSHA", script.sha, 0, a)) for a in args]]
    finally:
        await coalescer.aclose()
        await client.aclose()
