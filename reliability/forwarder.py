"""A TCP forwarder that can stall: the network to a replica, as the chaos harness and the e2e
tests break it. Between the proxy and a simulator it copies bytes both ways; `stall()` makes it
stop copying (bytes already read are held, nothing more is read, so TCP windows fill and the
proxy sees a silent peer, neither a reset nor an EOF); `resume()` lets them through again.

It runs its own event loop in a daemon thread so synchronous test code can drive it; `stall`
and `resume` are thread-safe (they hop onto that loop)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

CHUNK = 64 * 1024


class Forwarder:
    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0  # accepted so far
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None  # set: forwarding; clear: stalled
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="forwarder")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Forwarder:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stall(self) -> None:
        self._loop.call_soon_threadsafe(self._gate().clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._gate().set)

    def _gate(self) -> asyncio.Event:
        assert self._open is not None, "start() first"
        return self._open

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            self._gate().set()  # stalled pumps wake, find their peers closed, and end

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        gate = self._gate()
        try:
            while True:
                await gate.wait()  # stalled: read nothing more, so the sender's window fills
                data = await reader.read(CHUNK)
                if not data:
                    break
                await gate.wait()  # stalled mid-chunk: hold it
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
