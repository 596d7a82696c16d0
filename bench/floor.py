"""`python -m bench.floor`: what one token costs a Python relay before any proxy logic.

The question it answers (the per-token CPU targets): in the 256 streams x 20 ms row every
token arrives alone, so each costs a socket read, an event-loop wake-up and a socket write on top
of whatever the proxy does with it. How much is that floor, and how much do the shapes of the
code around it (a task waiting on a future, async generators, an ASGI-style `send`) add?

A load process (core 1) serves N upstream connections that each get a ~200-byte SSE chunk every
`delay` ms, and opens N client connections to the relay (core 0) that read what comes back. The
relay, one process, one uvloop loop, pipes each upstream connection to its client in one of
these shapes (the measured figure is the relay's CPU per chunk, utime+stime from /proc):

    callback   upstream `data_received` writes to the client transport: no task, no future
    task       a task per stream: await a future the protocol resolves, then write (the shape
               of proxy/upstream/http1.py's reader under a streaming task)
    layers     `task` plus four async generators between the read and the write and an ASGI
               `send(message)` coroutine (the shape of the proxy's stream path)
    translate  `layers` plus what the Responses path does per chunk in pure code: the SSE line
               split, `orjson.loads`, a new event dict, `orjson.dumps`, the SSE frame

It is a yardstick, not the proxy: the gap between `callback` and `layers` is the price of the
stream's coroutine shape; `translate` minus `layers` the price of translating (compare with the
proxy's store-off row); `callback` is what any Python relay on this loop pays per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from bench.options import module_parser
from bench.procs import CLK_TCK, free_port, pin_self

HOST = "127.0.0.1"
SHAPES = ("callback", "task", "layers", "translate")
Cores = tuple[frozenset[int] | None, frozenset[int] | None]
CHUNK = (b'data: {"id":"chatcmpl-9eeb3e4b887e4bdaac50b5613b236d64","object":'
         b'"chat.completion.chunk","created":1795442988,"model":"sim-model","choices":[{"index'
         b'":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]}\n\n')


@dataclass(frozen=True)
class Result:
    shape: str
    streams: int
    delay_ms: float
    chunks: int
    cpu_ms: float

    @property
    def us_per_chunk(self) -> float:
        return self.cpu_ms * 1000 / self.chunks if self.chunks else float("nan")


# -- the relay (measured) ----------------------------------------------------------------------
class _Upstream(asyncio.Protocol):
    """One upstream connection; hands each read to `sink` (callback) or to a waiting task."""

    def __init__(self, sink: Callable[[bytes], None] | None) -> None:
        self.sink = sink
        self.buffer: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink(data)
            return
        self.buffer.append(data)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            self.waiter = None
            waiter.set_result(None)

    async def reads(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        while True:
            if self.buffer:
                data = b"".join(self.buffer)
                self.buffer.clear()
                yield data
            else:
                self.waiter = loop.create_future()
                await self.waiter


async def _layer(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for data in source:
        yield data


async def _translate(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    seq = 0
    dumps, loads = orjson.dumps, orjson.loads
    async for data in source:
        out = []
        for line in data.split(b"\n"):
            if line.startswith(b"data: "):
                chunk = loads(line[6:])
                seq += 1
                event = {"type": "response.output_text.delta", "sequence_number": seq,
                         "item_id": "msg_0", "output_index": 0, "content_index": 0,
                         "delta": chunk["choices"][0]["delta"]["content"], "logprobs": []}
                out.append(b"event: response.output_text.delta\ndata: " + dumps(event)
                           + b"\n\n")
        yield b"".join(out)


def _sender(transport: asyncio.WriteTransport) -> Callable[[dict[str, Any]], Awaitable[None]]:
    async def send(message: dict[str, Any]) -> None:  # an ASGI server's send, reduced
        body = message.get("body", b"")
        if body:
            transport.write(b"%x\r\n%s\r\n" % (len(body), body))
    return send


async def _pipe(shape: str, upstream: _Upstream, client: asyncio.WriteTransport) -> None:
    if shape == "task":
        async for data in upstream.reads():
            client.write(data)
        return
    body: AsyncIterator[bytes] = upstream.reads()
    for _ in range(4):
        body = _layer(body)
    if shape == "translate":
        body = _translate(body)
    send = _sender(client)
    async for data in body:
        await send({"type": "http.response.body", "body": data, "more_body": True})


async def _relay_main(shape: str, port: int, upstream_port: int, ready: Any) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.transport
        sink = client.write if shape == "callback" else None
        _, upstream = await loop.create_connection(lambda: _Upstream(sink), HOST, upstream_port)
        if sink is None:
            task = asyncio.create_task(_pipe(shape, upstream, client))
            tasks.add(task)
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client goes away

    server = await asyncio.start_server(accept, HOST, port)
    ready.set()
    async with server:
        await asyncio.sleep(3600)


def _relay(shape: str, port: int, upstream_port: int, core: frozenset[int] | None,
           ready: Any) -> None:
    import uvloop

    pin_self(core)
    uvloop.run(_relay_main(shape, port, upstream_port, ready))


# -- the load (not measured) -------------------------------------------------------------------
async def _load(port: int, upstream_port: int, streams: int, delay: float, seconds: float,
                relay_pid: int) -> tuple[int, float]:
    writers: list[asyncio.StreamWriter] = []

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(asyncio.CancelledError):  # the end of the measurement
            await asyncio.sleep(3600)

    received = 0

    async def read(reader: asyncio.StreamReader) -> None:
        nonlocal received
        while data := await reader.read(65536):
            received += data.count(b"\n\n")

    server = await asyncio.start_server(serve, HOST, upstream_port)
    readers = []
    for _ in range(streams):
        reader, writer = await asyncio.open_connection(HOST, port)
        readers.append((asyncio.create_task(read(reader)), writer))
    for _ in range(200):  # bounded: every relay connection made within 10 s
        if len(writers) >= streams:
            break
        await asyncio.sleep(0.05)

    async def tick(writer: asyncio.StreamWriter, offset: float) -> None:
        await asyncio.sleep(offset)
        loop = asyncio.get_running_loop()
        at = loop.time()
        while True:
            writer.write(CHUNK)
            at += delay / 1000
            await asyncio.sleep(max(0.0, at - loop.time()))

    tickers = [asyncio.create_task(tick(w, i * delay / 1000 / streams))
               for i, w in enumerate(writers)]
    await asyncio.sleep(1.0)  # warm-up
    start_cpu, start_seen = _cpu_ms(relay_pid), received
    await asyncio.sleep(seconds)
    cpu, seen = _cpu_ms(relay_pid) - start_cpu, received - start_seen
    for task in tickers:
        task.cancel()
    for task, writer in readers:
        task.cancel()
        writer.close()
    server.close()
    return seen, cpu


def _cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK


def measure(shape: str, streams: int, delay: float, seconds: float,
            cores: Cores) -> Result:
    port, upstream_port = free_port(), free_port()
    # spawn, not fork: the caller may have threads (pytest's timeout thread, a loop's executor)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    relay = context.Process(target=_relay, args=(shape, port, upstream_port, cores[0],
                                                         ready), daemon=True)
    relay.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the relay did not start")
        pin_self(cores[1])
        import uvloop

        chunks, cpu = uvloop.run(_load(port, upstream_port, streams, delay, seconds,
                                       relay.pid or 0))
    finally:
        relay.terminate()
        relay.join(5)
    return Result(shape, streams, delay, chunks, cpu)


def main(argv: list[str] | None = None) -> None:
    parser = module_parser("bench.floor", __doc__)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--delay", type=float, default=20.0, help="ms between a stream's chunks")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; the median is reported (default 3)")
    args = parser.parse_args(argv)
    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape not in SHAPES:
            parser.error(f"--shapes: unknown shape {shape!r} (from {', '.join(SHAPES)})")
    two = (os.cpu_count() or 1) >= 2
    cores: Cores = (frozenset({0}), frozenset({1})) if two else (None, None)
    results: dict[str, list[Result]] = {shape: [] for shape in shapes}
    for _ in range(max(1, args.rounds)):  # interleaved: a disturbance hits every shape alike
        for shape in shapes:
            results[shape].append(measure(shape, args.streams, args.delay, args.seconds, cores))
    print("| shape | streams | ms between chunks | chunks/s | relay CPU µs per chunk (median)"
          " | all rounds |")
    print("|---|---:|---:|---:|---:|---|")
    for shape, runs in results.items():
        per = [r.us_per_chunk for r in runs]
        rate = statistics.median(r.chunks for r in runs) / args.seconds
        print(f"| {shape} | {args.streams} | {args.delay:g} | {rate:.0f} | "
              f"{statistics.median(per):.1f} | {', '.join(f'{p:.1f}' for p in per)} |")


if __name__ == "__main__":
    main()
