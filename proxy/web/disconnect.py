"""Stop work for a client that has gone away, on requests answered with one JSON body.

Streams notice a disconnect through their response (the SSE sender is cancelled); a JSON request
would otherwise keep its upstream generating until the end. `unless_disconnected` runs the work
while it watches `receive()` (after the body is read, the server answers it only with
`http.disconnect`), and cancels the work when the client leaves, which closes the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from proxy.core.errors import ProxyError

T = TypeVar("T")


class ClientGone(ProxyError):
    """Nobody will read this; nginx's 499 is the closest name for it in logs."""

    status = 499
    type = "invalid_request_error"
    code = "client_closed_request"


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    gone = asyncio.Event()

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone.set()
                task.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if gone.is_set():
            raise ClientGone("The client closed the connection.") from None
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
