"""`HeldHead`: a response's head written with its first body bytes, in one `write`.

uvicorn writes a response's head (status line and headers) the moment the app sends
`http.response.start`, and its body at the next message: two `send` system calls for an answer
that is ready at once (a JSON body, a stream's first event), ~10 µs of the kernel's and one TCP
segment more per request. A cycle's transport is a `HeldHead` until its first write: that
write (the head) is held and leaves with the cycle's next write if that comes before the loop
has run what was ready when the head was written (the rest of that turn and the next, where a
task the writer started, such as web/eventstream.py's event writer, takes its first step), else
alone right then: a head never waits for a slow first token, only for work already queued.
From then on the cycle writes to the connection's transport itself: nothing per token. Measured
(strace, a stored 16-token stream, 32 clients): 5.96 writes per request before, 4.89 after.

Closing the cycle's transport before its next write (a connection closed after a head alone)
writes the head first. Only the cycle's own writes are held; the connection's (a 400 for a
malformed request, a WebSocket upgrade) go to the transport.

`quick_start`: the head itself made with at most two searches, of what no earlier head had.
uvicorn checks each header it sends against two regular expressions, a search each (an SSE
stream's five headers cost ~9k instructions and a Python step per header: about 1% of a stored
stream's set-up before its first delta), though nearly all of them are the same bytes every time.
The app's front middleware (web/middleware/front.py) hands a response's start to the cycle's
`quick_start` (in the request's scope, `QUICK_START`, put there by process/headtimeout.py)
with the server's `send` when nothing of ours sits between the two: it checks the names not
seen before in one search of them joined, the values not seen before in one of them joined by a
tab (which a value may hold and a name may not), and writes the very bytes uvicorn writes. A
start with a header uvicorn acts on (`transfer-encoding`, `connection`, more than one
`content-length`), a character either search finds, or anything malformed is left to uvicorn's
own `send`, which makes or refuses it as always. Not by changing the cycle's `send`: uvicorn
hands the app that bound method once, so every body write (each token) would pay for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)


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
            self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """The turn after the head's: the tasks started with the head (a stream's writer:
        web/eventstream.py sends the head, then starts the task that writes the events) run
        their first step in this turn, after this callback; the head waits for them."""
        if self._cycle.transport is self:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The tasks ready with the head have run: a head still held leaves now."""
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


# Headers uvicorn's start acts on, besides writing them: either in the names (lowered, joined)
# sends the start to uvicorn's own code (a false alarm, `x-connection-id`, only costs it the
# slow way).
_TRANSFER_ENCODING, _CONNECTION = b"transfer-encoding", b"connection"
_CONTENT_LENGTH = b"content-length"
_LINE = b"%s: %s\r\n".__mod__


class _Seen(set[bytes]):
    """Header names (or values) a search found nothing wrong in: the same bytes need no search
    again. Bounded: forgotten whole past `bound` items, and only `bytes` of at most `longest`
    are kept (a request's id is new every time; a `memoryview` equal to some bytes is not
    bytes)."""

    def __init__(self, bound: int = 1024, longest: int = 256) -> None:
        super().__init__()
        self._bound = bound
        self._longest = longest

    def new(self, items: list[bytes]) -> set[bytes]:
        return set(items).difference(self)

    def keep(self, items: Iterable[Any]) -> None:
        """`items` (a head's new ones: nearly always one) as seen, those the bounds allow."""
        if len(self) >= self._bound:
            self.clear()
        longest = self._longest
        self.update(item for item in items if item.__class__ is bytes and len(item) <= longest)


# Process-wide, as the bytes they hold are valid in any response (a cache, not state).
_NAMES_SEEN, _VALUES_SEEN = _Seen(), _Seen()


def quick_start(send: Any, message: Any) -> bool:
    """The start `message` of the response whose server `send` is `send` (the cycle's own,
    as uvicorn hands it to the app) written as that `send` writes it, if it is a plain one;
    False (nothing done, nothing changed) for any other: `send` then makes it, or refuses it in
    its own words. The scope holds this function, not one bound to the cycle: the scope is the
    cycle's, and a cycle held by its own scope would wait for the garbage collector."""
    cycle = getattr(send, "__self__", None)
    if cycle.__class__ is not RequestResponseCycle or cycle.response_started \
            or cycle.disconnected or cycle.flow.write_paused or cycle.access_log:
        return False
    try:
        return _quick_start(cycle, message)
    except (TypeError, ValueError, KeyError, AttributeError):
        # A header that is not a pair of bytes, no status, a bad length: uvicorn's own error,
        # raised from its own state (it marks the response started first).
        return False


def _quick_start(cycle: Any, message: Any) -> bool:
    headers = cycle.default_headers + list(message.get("headers", []))
    names = [name for name, _ in headers]
    values = [value for _, value in headers]
    # Only what was not seen before is searched: nearly every name, and every value but a
    # request's id, is one an earlier head had (the search costs ~30 instructions a byte).
    new_names, new_values = _NAMES_SEEN.new(names), _VALUES_SEEN.new(values)
    if (new_names and HEADER_RE.search(b"".join(new_names))) or \
            (new_values and HEADER_VALUE_RE.search(b"\t".join(new_values))):
        return False  # uvicorn's loop names the first bad header
    _NAMES_SEEN.keep(new_names)
    _VALUES_SEEN.keep(new_values)
    lowered = b"\n".join(names).lower()
    if _TRANSFER_ENCODING in lowered or _CONNECTION in lowered \
            or lowered.count(_CONTENT_LENGTH) > 1:
        return False
    lines = lowered.split(b"\n")
    if _CONTENT_LENGTH in lowered and _CONTENT_LENGTH not in lines:
        return False  # part of another name only: uvicorn's way
    status = message["status"]
    length = (int(values[lines.index(_CONTENT_LENGTH)].decode())
              if _CONTENT_LENGTH in lines else None)
    # (Not strict: with no header at all, `lines` is one empty name for no value.)
    content = [STATUS_LINE[status], *map(_LINE, zip(lines, values, strict=False))]
    # Nothing can fail from here: the start is committed.
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if length is not None:
        cycle.expected_content_length = length
        cycle.chunked_encoding = False
    if not cycle.keep_alive:
        content.append(b"connection: close\r\n")
    if length is None and cycle.scope["method"] != "HEAD" and status not in (204, 304):
        cycle.chunked_encoding = True
        content.append(b"transfer-encoding: chunked\r\n")
    content.append(b"\r\n")
    cycle.transport.write(b"".join(content))
    return True
