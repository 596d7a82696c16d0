"""The app in-process for integration tests: its lifespan running behind an httpx client, and a
bounded poll for a state the test waits for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from proxy.app import create_app
from proxy.runtime import Runtime
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


def post_scope(path: str, body: bytes) -> dict[str, Any]:
    """An ASGI scope for `POST path` with a JSON body, for tests that drive the app's ASGI
    callable themselves (to hold a request open or to watch its sends)."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"", "client": ("127.0.0.1", 50000),
            "server": ("proxy", 80),
            "headers": [(b"host", b"proxy"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


def receive_until(body: bytes, leave: asyncio.Event) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI `receive` for a client that sends `body` whole, then leaves once `leave` is set
    (for tests that drive the app's callable themselves and decide when the client goes)."""
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}
    return receive
