"""One row of the benchmark: N closed-loop clients against one system.

How a row runs (all times from `time.perf_counter`, see `client.py`):

    connect N keep-alive connections (not measured; a client that starts more than
    FRESH_AFTER seconds into the ramp connects again when it starts)
    t0 ── ramp ──▶ window start ─────── measured window ───────▶ window end ── drain ──▶ done
         client i sends its first request at t0 + i * ramp / N, then its next one as soon as
         the previous ends (closed loop); after the window end nobody starts a new request
         and the requests in flight run to their end (each bounded by `timeout`).

The ramp spreads the clients over one request duration, so that the window sees a steady
state instead of N requests arriving in the same millisecond (with a 0 ms token delay the ramp
is 0: the answer time is not known in advance, and the load is CPU-bound either way).

The window lasts at least `min_seconds` and until `waves * N` requests have ended inside it
(two full waves of requests: every client went round at least about twice), but never longer
than `max_seconds` (`hit_max` then says so). Measured in the window: the content deltas received
(a counter that every connection adds to as bytes arrive, read at both ends, so requests still
running at either end count for what they streamed inside), requests ended, and whatever the
caller's `sampler` reads at both ends (CPU counters). Latency samples are kept for every request;
`stats.py` summarises those that started inside the window.

Bounded: a row takes at most ramp + max_seconds + timeout + CLOSE_GRACE seconds; a failed
connect is retried after `RETRY_DELAY`, an error after `ERROR_PAUSE` (a dead server cannot turn
the row into a busy loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bench.checks import StreamKind, new_check
from bench.client import Connection, Exchange, Tally, connect, now

M = TypeVar("M")

POLL = 0.02  # how often the window checks whether it may end
RETRY_DELAY = 0.1
ERROR_PAUSE = 0.01
CLOSE_GRACE = 5.0
# A client whose first request waits longer than this behind the ramp opens its connection
# when it starts instead: servers close a connection silent for their keep-alive timeout
# (uvicorn's 5 s default, which the proxy also applies to a new connection), and a request
# written as the close crosses it is lost. Under any keep-alive timeout a server would use.
FRESH_AFTER = 3.0


@dataclass(frozen=True)
class RowPlan:
    host: str
    port: int
    request: bytes
    kind: StreamKind
    tokens: int
    concurrency: int
    ramp: float
    min_seconds: float
    max_seconds: float
    timeout: float
    waves: int = 2
    connect_timeout: float = 5.0
    capture: bool = False  # keep the body of the row's first request (tests, debugging)


@dataclass(frozen=True)
class Sample:
    """One request: times in seconds, `start` relative to the row's t0."""

    start: float
    ttft: float | None
    latency: float
    tokens: int
    error: str | None


@dataclass
class RowRun(Generic[M]):
    samples: list[Sample]
    window: tuple[float, float]  # relative to t0
    window_tokens: int
    window_completed: int
    total_tokens: int
    marks: tuple[M, M]
    hit_max: bool
    elapsed: float
    captured: bytes | None = None


@dataclass
class _Row(Generic[M]):
    plan: RowPlan
    sampler: Callable[[], M]
    tally: Tally = field(default_factory=Tally)
    samples: list[Sample] = field(default_factory=list)
    t0: float = 0.0
    window_open: bool = False
    window_completed: int = 0
    stopping: bool = False
    capture_pending: bool = False
    captured: bytes | None = None

    async def client(self, index: int, conn: Connection | None) -> None:
        plan = self.plan
        offset = plan.ramp * index / plan.concurrency
        await asyncio.sleep(max(0.0, self.t0 + offset - now()))
        if offset > FRESH_AFTER and conn is not None:
            conn.close()  # silent since the row began: see FRESH_AFTER
            conn = None
        try:
            while not self.stopping:
                if conn is None or conn.closed:
                    conn = await self._reconnect()
                    if conn is None:
                        continue
                capture = self.capture_pending
                self.capture_pending = False
                exchange = await conn.exchange(plan.request, new_check(plan.kind), plan.tokens,
                                               plan.timeout, capture=capture)
                self._record(exchange)
                if capture:
                    self.captured = exchange.body
                if exchange.error is not None:
                    await asyncio.sleep(ERROR_PAUSE)
        finally:
            if conn is not None:
                conn.close()

    async def _reconnect(self) -> Connection | None:
        plan = self.plan
        started = now()
        try:
            return await connect(plan.host, plan.port, self.tally, plan.connect_timeout)
        except (OSError, TimeoutError) as exc:
            self._add(Sample(started - self.t0, None, now() - started, 0,
                             f"connect: {type(exc).__name__}"))
            await asyncio.sleep(RETRY_DELAY)
            return None

    def _record(self, ex: Exchange) -> None:
        ttft = ex.first - ex.sent if ex.first is not None else None
        self._add(Sample(ex.sent - self.t0, ttft, ex.ended - ex.sent, ex.deltas, ex.error))

    def _add(self, sample: Sample) -> None:
        self.samples.append(sample)
        if self.window_open:
            self.window_completed += 1

    async def window(self) -> tuple[tuple[float, float], int, tuple[M, M], bool]:
        plan = self.plan
        await asyncio.sleep(max(0.0, self.t0 + plan.ramp - now()))
        start = now()
        tokens_at_start = self.tally.tokens
        first = self.sampler()
        self.window_open = True
        hit_max = False
        needed = plan.waves * plan.concurrency
        while True:
            await asyncio.sleep(POLL)
            elapsed = now() - start
            if elapsed >= plan.max_seconds:
                hit_max = True
                break
            if elapsed >= plan.min_seconds and self.window_completed >= needed:
                break
        self.window_open = False
        end = now()
        tokens = self.tally.tokens - tokens_at_start
        last = self.sampler()
        self.stopping = True
        return (start - self.t0, end - self.t0), tokens, (first, last), hit_max


async def run_row(plan: RowPlan, sampler: Callable[[], M]) -> RowRun[M]:
    """Run one row (see the module docstring); `sampler` is read at the window's two ends."""
    row: _Row[M] = _Row(plan, sampler, capture_pending=plan.capture)
    conns = await _connect_all(plan, row.tally)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collector pauses inside the measurement; re-enabled below
    try:
        row.t0 = now()
        clients = [asyncio.create_task(row.client(i, conns[i]))
                   for i in range(plan.concurrency)]
        window_task = asyncio.create_task(row.window())
        bound = plan.ramp + plan.max_seconds + plan.timeout + CLOSE_GRACE
        try:
            window, tokens, marks, hit_max = await asyncio.wait_for(window_task, bound)
            _, pending = await asyncio.wait(clients, timeout=plan.timeout + CLOSE_GRACE)
        finally:
            row.stopping = True
            for task in [*clients, window_task]:
                task.cancel()
            for task in [*clients, window_task]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for _ in pending:  # impossible while every exchange has its own timer; counted if not
            row.samples.append(Sample(now() - row.t0, None, 0.0, 0, "client stuck at drain"))
        elapsed = now() - row.t0
    finally:
        for conn in conns:
            if conn is not None:
                conn.close()
        if gc_was_enabled:
            gc.enable()
    return RowRun(row.samples, window, tokens, row.window_completed, row.tally.tokens, marks,
                  hit_max, elapsed, row.captured)


async def _connect_all(plan: RowPlan, tally: Tally) -> list[Connection | None]:
    async def one() -> Connection | None:
        try:
            return await connect(plan.host, plan.port, tally, plan.connect_timeout)
        except (OSError, TimeoutError):
            return None  # the client retries, and counts the failure, once the row runs

    return list(await asyncio.gather(*(one() for _ in range(plan.concurrency))))
