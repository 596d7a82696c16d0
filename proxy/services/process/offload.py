"""A request's large CPU steps, run off the event loop.

One request body may be `--max-body-bytes` (16 MiB by default). Its parse, its walk into
stored items and chat messages and its cache key are linear, but linear in 16 MiB of JSON is
hundreds of milliseconds of Python, and on the loop that is hundreds of milliseconds in which
no other request (no stream's token, no `/healthz`) moves: the contract bounds that stall at
~100 ms (docs/contract.md, "Cost bounds"). In a worker thread the same work gives the loop the GIL
back every switch interval (5 ms), and hashlib and orjson's larger calls are short enough
at these sizes.

Only for a large body: a thread hop costs ~50 µs and an executor slot, and the small requests
that are nearly all of the traffic (per-request CPU is benchmarked) stay exactly as they were.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# Bodies up to this size run on the loop: 1 MiB of JSON is ~1-10 ms of parse and walk here,
# and the default thread pool stays free for the bodies that need it.
OFFLOAD_BYTES = 1024 * 1024


def large(size: int) -> bool:
    # (services/responses/create.py and web/incoming.py test `OFFLOAD_BYTES` inline, a call
    # fewer per request: a change of this rule changes theirs.)
    return size > OFFLOAD_BYTES


async def run(size: int, step: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`step(*args, **kwargs)`, in a worker thread when `size` (the body's bytes) is large.
    `step` must be pure CPU on data no other task touches meanwhile."""
    if not large(size):
        return step(*args, **kwargs)
    return await asyncio.to_thread(step, *args, **kwargs)
