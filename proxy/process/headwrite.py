"""`HeldHead`: a response's head written with its first body bytes, in one `write`.

uvicorn writes a response's head (status line and headers) the moment the app sends
`http.response.start`, and its body at the next message: two `send` system calls for an answer
that is ready at once (a JSON body, a stream's first event), ~10 µs of the kernel's and one TCP
segment more per request. A cycle's transport is a `HeldHead` until its first write: that
write (the head) is held, and leaves with the next write of the cycle when it comes in the same
turn of the event loop, else at the start of the next turn (a callback the loop runs before it
waits for anything): a head never waits for a slow first token. From then on the cycle writes
to the connection's transport itself: nothing per token.

Closing the cycle's transport before its next write (a connection closed after a head alone)
writes the head first. Only the cycle's own writes are held; the connection's (a 400 for a
malformed request, a WebSocket upgrade) go to the transport.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class _Cycle(Protocol):
    transport: Any


class HeldHead:
    __slots__ = ("_cycle", "_head", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: _Cycle,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._cycle = cycle
        self._loop = loop
        self._head = b""

    def write(self, data: bytes) -> None:
        if self._head:  # the head, and the first bytes after it: one write
            self._cycle.transport = self._transport
            self._transport.write(self._head + data)
            self._head = b""
        elif data:
            self._head = data
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The end of the turn the cycle started in: a head still held leaves now."""
        if self._cycle.transport is self:
            self._cycle.transport = self._transport
            if self._head:
                self._transport.write(self._head)
                self._head = b""

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()
