"""The routes' hook into per-key limits (services/limits.py): admit before the work, end the
ticket when the answer is whole (a JSON body) or when its stream ends, however it ends.

Nothing here runs when no key has limits: `admitted` answers None without a round trip and
streams are handed on unwrapped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request

from proxy.services.limits import Ticket
from proxy.web.context import runtime_of, tenant

T = TypeVar("T")


async def admitted(request: Request, *, hold: bool) -> Ticket | None:
    """Admit the request or raise the 429 (`hold`: it takes a stream slot)."""
    limiter = runtime_of(request).limits
    if limiter is None or not limiter.active:
        return None
    return await limiter.admit(tenant(request), hold=hold)


async def released_on_error(ticket: Ticket | None, work: Awaitable[T]) -> T:
    """`work`, ending the ticket (no tokens used) if it fails or is cancelled before any
    answer exists."""
    try:
        return await work
    except BaseException:
        if ticket is not None:
            await asyncio.shield(ticket.end(0))
        raise


def metered(request: Request, ticket: Ticket | None, stream: AsyncIterator[bytes], *,
            usage: Callable[[], int] | None = None) -> AsyncIterator[bytes]:
    """`stream`, ending `ticket` when it ends; `usage`: the tokens, when the stream's own
    last frames do not carry them (a usage chunk the pass-through took out)."""
    limiter = runtime_of(request).limits
    if ticket is None or limiter is None:
        return stream
    return limiter.metered(ticket, stream, usage=usage)
