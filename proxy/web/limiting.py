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
from collections.abc import AsyncIterator

from starlette.requests import HTTPConnection

from proxy.services.metering.meter import Meter
from proxy.web.incoming import tenant
from proxy.web.state import runtime_of


def limits_on(conn: HTTPConnection) -> bool:
    limiter = runtime_of(conn).process.limits
    return limiter is not None and limiter.active


@contextlib.asynccontextmanager
async def metering(conn: HTTPConnection, *, hold: bool = False) -> AsyncIterator[Meter]:
    """Admit (`hold`: the request takes a stream slot until it settles), then settle in a
    `finally`, unless a stream or a background job took the meter over."""
    limiter = runtime_of(conn).process.limits
    if limiter is None or not limiter.active:
        yield Meter()
        return
    meter = Meter(await limiter.admit(tenant(conn), hold=hold))
    try:
        yield meter
    finally:
        await meter.close()
