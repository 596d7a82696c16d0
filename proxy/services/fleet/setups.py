"""`SetupGate`: a create's set-up (body, parse, history, translation, the upstream call opened)
runs with at most `slots` others at once, in arrival order.

Why: one event loop serves every request of the process. 256 requests arriving together each advance
one step per loop turn (parse, a store read, the upstream connect...), so every request's set-up is
interleaved with every other's and all of them reach the upstream at about the same time: each first
token waits for nearly the whole burst's set-up (~0.35 ms of CPU per request,
docs/benchmarks-history.md "Bursts: what a burst's first tokens wait for"). With a few set-ups at a
time the first to arrive is the first to reach its replica, and the first token of the k-th request
waits for about k set-ups, not all of them; the total work is the same.

Rules:
  - FIFO: a request waits behind every request that asked before it (no barging: a freed slot
    is handed to the oldest waiter, never to whoever asks next);
  - bounded: a request waits at most `timeout` seconds (the admission queue's, `--queue-timeout`),
    then gets the admission queue's 429 (`rate_limit_exceeded`, `Retry-After`);
  - a slot is held from the route's start until the request is admitted to its replica
    (`end_setup`, called by the gateway just before `Fleet.open`), or until the request ends,
    however it ends (an error, a cancelled task: the client left). Not across the upstream's
    connect and headers: those wait on the replica, not on this core, and a gate held across
    them throttled a burst to `slots` requests per upstream round trip (measured: 0.56 x
    direct). A request that must wait in the admission queue for a replica slot gives its
    set-up slot up first (`Admission.admit(on_queue=...)`): set-ups never wait on the fleet
    while holding the gate, so a burst past a replica's cap cannot starve the gate, and a
    saturated model does not hold up another model's set-ups;
  - per process, like the admission: each `serve --workers` child has its own;
  - off by default (`--setup-slots 0`): measured on a 256-stream burst, the first tenth's first
    tokens come ~10% sooner, the median does not move and the p99 rises a little (the streams
    started early relay their tokens on the same core while later set-ups wait), see
    docs/benchmarks-history.md "Bursts: what a burst's first tokens wait for". For deployments
    that want first come, first served.
The request finds its slot through its `RequestContext` (core/context/requestctx.py `end_setup`),
so the layers in between pass nothing by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from proxy.core.context.requestctx import CURRENT
from proxy.core.errors import RateLimited

RETRY_AFTER_S = 1  # as the admission queue's 429


class SetupGate:
    def __init__(self, slots: int, *, timeout: float) -> None:
        if slots < 1:
            raise ValueError("a set-up gate needs at least one slot")
        self.slots = slots
        self.timeout = timeout
        self._free = slots
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def busy(self) -> int:
        return self.slots - self._free

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """A slot for the current request's set-up; given back at the first of `end_setup()`
        or the block's exit (normal, error or cancellation)."""
        await self._acquire()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release()

        context = CURRENT.get()
        if context is not None:
            context.end_setup = release
        try:
            yield
        finally:
            if context is not None and context.end_setup is release:
                context.end_setup = None
            release()

    async def _acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1  # no task, no timer: the common case costs nothing
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.append(future)
        # A timer, not `asyncio.wait(timeout=)`: the waiter resumes in the very loop turn its
        # slot is handed over (`wait` adds a turn per hand-over, and a burst makes many).
        timer = loop.call_later(self.timeout, self._expire, future)
        try:
            await future
        except asyncio.CancelledError:  # the client left while queued
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release()  # granted as we left: hand the slot on
            else:
                self._leave(future)
            raise
        finally:
            timer.cancel()

    def _expire(self, future: asyncio.Future[None]) -> None:
        if not future.done():
            self._leave(future)
            future.set_exception(RateLimited(
                "The proxy is saturated: this request's set-up did not start within "
                f"{self.timeout:g} s. Retry after {RETRY_AFTER_S} s.", retry_after=RETRY_AFTER_S))

    def _leave(self, future: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(future)

    def _release(self) -> None:
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)  # the slot passes to the oldest waiter
                return
        self._free += 1
