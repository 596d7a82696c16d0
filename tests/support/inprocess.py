"""The app in-process for integration tests: its lifespan running behind an httpx client, and a
bounded poll for a state the test waits for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

from proxy.app import create_app
from proxy.services.runtime import Runtime
from proxy.settings import Settings


@contextlib.asynccontextmanager
async def app_for(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http, app.state.runtime


async def until(check: Callable[[], Awaitable[bool]], *, tries: int = 300,
                interval: float = 0.05) -> None:
    """Polls `check` until true, at most `tries` times `interval` (a bound, not a speed claim)."""
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(interval)
    raise AssertionError("condition never became true")
