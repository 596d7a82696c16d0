"""Graceful drain: what a `serve` process does between SIGTERM and its exit.

Phases (`Drain.run`), each bounded:
1. draining starts: `/readyz` answers 503 (`draining`) so load balancers stop sending, and new
   requests are refused with 503 `server_shutting_down` + `Retry-After`
   (web/middleware/draining.py); health and metrics still answer. The listening socket stays open
   meanwhile: a refused request tells its client to go elsewhere, a closed port would only look like
   a crash;
2. the in-process worker stops taking jobs and hands back the ones it has not started
   (`Worker.stop`, given the same grace), while the requests in flight (streams, replays,
   JSON calls) run on for up to `grace` seconds;
3. when the grace is over, every foreground generation still running here is interrupted: its
   client gets `response.failed` ("the server is shutting down"), stored before it is sent
   like any terminal event, so a replay from another instance sees the same end;
4. then uvicorn's own shutdown closes the socket and the connections that are left (replays of
   responses made elsewhere: their clients resume with `starting_after` on another instance).

Counting in-flight requests costs one increment per request, never anything per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterator
from typing import Protocol

log = logging.getLogger("proxy.drain")

SHUTTING_DOWN = "the server is shutting down: this response was stopped before it finished"
# Seconds interrupted generations get to store and send their terminal event after the grace.
INTERRUPT_SECONDS = 5.0


class Interruptible(Protocol):
    def interrupt(self, reason: str) -> None: ...


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # Foreground generations running in this process, by response id.
        self._generations: dict[str, Interruptible] = {}
        self._no_generations = asyncio.Event()
        self._no_generations.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    # -- requests (web/middleware/draining.py) -----------------------------------------------------
    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.began()
        try:
            yield
        finally:
            self.ended()

    def began(self) -> None:
        """A request in flight, until its `ended`: `request()` without a generator's context
        manager (~1 µs a request), for the front middleware's `try`/`finally`."""
        self._in_flight += 1
        self._idle.clear()

    def ended(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    # -- generations (services/responses/create.py) ------------------------------------------------
    @contextlib.contextmanager
    def generation(self, response_id: str, generation: Interruptible) -> Iterator[None]:
        """Registers a foreground generation while it runs, so the grace's end can stop it."""
        self.generation_began(response_id, generation)
        try:
            yield
        finally:
            self.generation_ended(response_id, generation)

    def generation_began(self, response_id: str, generation: Interruptible) -> None:
        """`generation()` as two calls (a create's turn: services/responses/create.py
        `_Owned`), without a generator's context manager (~1 µs a turn)."""
        self._generations[response_id] = generation
        self._no_generations.clear()

    def generation_ended(self, response_id: str, generation: Interruptible) -> None:
        if self._generations.get(response_id) is generation:
            del self._generations[response_id]
        if not self._generations:
            self._no_generations.set()

    def interrupt(self, response_id: str, reason: str) -> bool:
        generation = self._generations.get(response_id)
        if generation is None:
            return False
        generation.interrupt(reason)
        return True

    @property
    def generations(self) -> int:
        return len(self._generations)

    # -- the drain itself --------------------------------------------------------------------------
    async def run(self, grace: float, worker_stop: Awaitable[None] | None = None) -> None:
        started = time.monotonic()
        # 1. readiness off, new requests refused
        self.draining = True
        log.info("draining: %d request(s) in flight get up to %gs", self._in_flight, grace)
        # 2. the worker hands back queued jobs and lets running ones finish (same grace)
        stopping = asyncio.ensure_future(worker_stop) if worker_stop is not None else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._idle.wait()
        # 3. past the grace: the generations still running end with response.failed
        if self._generations:
            log.warning("grace over: stopping %d response(s) still generating",
                        len(self._generations))
            for generation in list(self._generations.values()):
                generation.interrupt(SHUTTING_DOWN)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(INTERRUPT_SECONDS):
                    await self._no_generations.wait()
        if stopping is not None:
            await stopping
        log.info("drained in %.1fs; %d request(s) left to the server's shutdown",
                 time.monotonic() - started, self._in_flight)
