"""The routes' one hook into per-key limits: `metering` admits the request (or raises its 429)
and settles what it spent however it ends (services/metering/meter.py). Every billable entry point
uses it, the WebSocket too (a `WebSocket` is an `HTTPConnection` like a `Request`):

    async with metering(request, hold=streams) as meter:
        outcome = await service.work(..., meter=meter)   # the service tracks what it spends

Nothing here costs a round trip when no key has limits: the meter then counts nothing and
streams are handed on unwrapped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from proxy.services.metering.limits import Limiter
from proxy.services.metering.meter import Meter
from proxy.web.incoming import json_body, tenant
from proxy.web.rendering import json_response
from proxy.web.state import state_of


def limits_on(conn: HTTPConnection) -> bool:
    limiter = state_of(conn).limiter
    return limiter is not None and limiter.active


def metering(conn: HTTPConnection, *, hold: bool = False
             ) -> contextlib.AbstractAsyncContextManager[Meter]:
    """Admit (`hold`: the request takes a stream slot until it settles), then settle in a
    `finally`, unless a stream or a background job took the meter over. No key with limits: a
    meter that counts nothing, from a plain context manager (an `asynccontextmanager` made,
    registered with the loop and closed an async generator per request: 1.7 µs against 0.3)."""
    limiter = state_of(conn).limiter
    if limiter is None or not limiter.active:
        return _UNMETERED
    return _metered(limiter, conn, hold)


class _Unmetered:
    """The context of a request no limit applies to: a fresh `Meter()` that counts nothing."""

    __slots__ = ()

    async def __aenter__(self) -> Meter:
        return Meter()

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_UNMETERED = _Unmetered()  # stateless: one for every request


@contextlib.asynccontextmanager
async def _metered(limiter: Limiter, conn: HTTPConnection, hold: bool) -> AsyncIterator[Meter]:
    meter = Meter(await limiter.admit(tenant(conn), hold=hold))
    try:
        yield meter
    finally:
        await meter.close()


async def metered_write(request: Request,
                        write: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
                        ) -> Response:
    """A route that stores what its JSON body says: the body read, the write metered (it
    counts in the key's `rpm`), the object it made rendered."""
    body = await json_body(request)
    async with metering(request):
        return json_response(await write(body))
