"""Stop work for a client that has gone away: one watcher of `http.disconnect` per request.

After the body is read, the server answers `receive()` only with `http.disconnect`. A `Departure`
is the one task that waits for it, and tells whoever is aimed at it: the work of a request
answered with one JSON body (a JSON request would otherwise keep its upstream generating until
the end), then, for a stream, the stream's sender (web/eventstream.py), which closes the
upstream. A streamed create keeps the watcher it had while it was set up rather than starting a
second one for its stream: a task fewer per stream (~7 µs and a loop step each).

`unless_disconnected` runs the work in the request's own task and cancels that task when the
client leaves (a task of its own for the work cost another ~7 µs), then turns that cancellation
into `ClientGone`; a cancellation from anywhere else stays one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.types import Receive, Scope

from proxy.core.errors import ProxyError

T = TypeVar("T")

# Where a create that answers with a stream leaves its watcher for the stream to take over.
DEPARTURE = "proxy.departure"


class ClientGone(ProxyError):
    """Nobody will read this; nginx's 499 is the closest name for it in logs."""

    status = 499
    type = "invalid_request_error"
    code = "client_closed_request"


class Departure:
    """Waits for the client to leave; then `gone`, and the callback it is aimed at (if any) is
    called, once. `loop`: the running loop, when the caller has it (Python 3.11's
    `asyncio.get_running_loop`, which `asyncio.create_task` calls, is a `getpid` system call);
    kept for the stream that adopts the watcher (web/eventstream.py)."""

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.gone = False
        self._on_gone: Callable[[], None] | None = None
        self.loop = loop = loop or asyncio.get_running_loop()
        self._task = loop.create_task(self._watch(receive), name="client-departure")

    def aim(self, on_gone: Callable[[], None] | None) -> None:
        """What to call when the client leaves (None: nothing, the departure is only noted).
        Aimed once the client has gone already: called on the next loop step, where a watcher
        started now would have made the same call."""
        self._on_gone = on_gone
        if self.gone and on_gone is not None:
            self.loop.call_soon(on_gone)

    def stop(self) -> None:
        self._on_gone = None
        self._task.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                if self._on_gone is not None:
                    self._on_gone()
                return


def adopted(scope: Scope) -> Departure | None:
    """The request's watcher its handler left (`unless_disconnected(keep=...)`), if any: the
    stream's, and its loop the stream's too (web/eventstream.py)."""
    departure = scope.pop(DEPARTURE, None)
    return departure if isinstance(departure, Departure) else None


async def unless_disconnected(request: Request, work: Awaitable[T], *,
                              keep: Callable[[T], bool] | None = None) -> T:
    """`work`'s result, or `ClientGone` when the client left first. `keep(result)` true: the
    watcher goes on, left in the scope for the response (a stream) to adopt."""
    # One loop lookup for both (each of `current_task()` and `create_task` made its own
    # `getpid` system call).
    loop = asyncio.get_running_loop()
    current = asyncio.current_task(loop)
    assert current is not None
    departure = Departure(request.receive, loop)
    fired = False

    def cancel() -> None:
        nonlocal fired
        fired = True
        current.cancel()

    departure.aim(cancel)
    kept = False
    try:
        # The work starts on the next loop turn, as it did when it was a task of its own: a
        # burst's set-ups run one turn each, and what is already waiting (earlier arrivals'
        # upstream replies) gets its turn first. Run at once, each arrival's whole set-up ran in
        # the turn that read it, ahead of those replies: the first of a 128-request burst got
        # their first event ~45 ms late, with the last (tests/e2e/test_burst_e2e.py).
        await asyncio.sleep(0)
        result = await work
        kept = keep is not None and keep(result)
        return result
    except asyncio.CancelledError:
        # Ours alone (nobody else cancelled the request meanwhile): the client went away.
        if fired:
            fired = False
            if current.uncancel() == 0:
                raise ClientGone("The client closed the connection.") from None
        raise
    finally:
        departure.aim(None)
        if fired and current.cancelling():
            # The work ended (or failed) on its own after our cancel: that cancel is spent.
            current.uncancel()
        if kept:
            request.scope[DEPARTURE] = departure
        else:
            departure.stop()
