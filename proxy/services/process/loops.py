"""Tasks that must outlive the coroutine that started them.

Two uses:
- cleanup that must finish even though its caller is being cancelled: a client that goes away
  cancels the stream's task, and every later `await` in that task's `finally` would be cancelled
  too (anyio cancellation is level-triggered). `shielded()` runs the cleanup as its own task and
  waits for it under `asyncio.shield`, so closing the upstream (vLLM stops generating) and the
  final store write always complete;
- fire-and-forget work. asyncio keeps only weak references to tasks, so a set here holds them
  until they end, and `drain()` gives them a bounded time at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from proxy.core.errors import ProxyError, failure_cause

log = logging.getLogger("proxy.tasks")
T = TypeVar("T")


class TaskSet:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None,
              report: bool = True) -> asyncio.Task[T]:
        """`report`: a failure is logged when the task ends (False: its awaiter reports it)."""
        # The loop's own `create_task`, named there: `asyncio.create_task` adds a Python call
        # to name it afterwards.
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if report:
            task.add_done_callback(_report)
        return task

    async def shielded(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> T:
        """Run `coro` to completion even if the caller is cancelled meanwhile (the caller then
        sees its CancelledError at once; the work goes on). Its failure is the caller's to
        report while the caller waits (one log line, not a traceback here and a line there);
        this set's once the caller has left."""
        task = self.spawn(coro, name=name, report=False)
        # What `asyncio.shield(task)` does, without its steps (ensure_future, isfuture, the
        # loop looked up, a callback each way: seven Python calls, once per stored answer's
        # final write): a future of our own, resolved when the task is done. Cancelling the
        # caller cancels that future only.
        over = task.get_loop().create_future()
        task.add_done_callback(functools.partial(_relay, over))
        try:
            await over
        except asyncio.CancelledError:
            if task.done():
                _report(task)
            else:
                task.add_done_callback(_report)
            raise
        return task.result()  # its value, or its failure (the caller's to report)

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for running tasks, then cancel what is left."""
        if not self._tasks:
            return
        pending = set(self._tasks)
        _, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            with contextlib.suppress(Exception):
                await asyncio.wait(still, timeout=1.0)


def _relay(over: asyncio.Future[None], _task: asyncio.Task[Any]) -> None:
    if not over.done():  # else the caller was cancelled meanwhile
        over.set_result(None)


def _report(task: asyncio.Task[Any]) -> None:
    """A failed task's one log line: a mapped failure (a store that refuses, an upstream gone)
    by its cause, anything else, a bug, with its traceback."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    if isinstance(exc, ProxyError):
        log.error("background task %s failed: %s", task.get_name(), failure_cause(exc))
    else:
        log.error("background task %s failed", task.get_name(), exc_info=exc)


# Restart delays of a crashed loop: doubling from the first, never above the last.
FIRST_RESTART_DELAY = 0.2
MAX_RESTART_DELAY = 10.0


class LoopSupervisor:
    """Keeps the long-running loops (job take, heartbeat, cancel listener, fleet discovery,
    event-log flusher) alive: a loop that raises is logged, restarted after a bounded,
    doubling delay, and counted as failing (`/readyz` says 503) until it has run as long as
    that delay without raising again. A loop that returns has ended on purpose (shutdown); a
    cancelled one propagates its cancellation, so callers stop loops as before."""

    def __init__(self, *, first_delay: float = FIRST_RESTART_DELAY,
                 max_delay: float = MAX_RESTART_DELAY) -> None:
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._failing: set[str] = set()
        self.restarts = 0

    def start(self, name: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        return asyncio.create_task(self._keep(name, loop), name=name)

    def failing(self) -> list[str]:
        return sorted(self._failing)

    async def _keep(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        delay = self._first_delay
        clock = asyncio.get_running_loop()
        while True:
            started = clock.time()
            settled = clock.call_later(delay, self._failing.discard, name)
            try:
                await loop()
                self._failing.discard(name)
                return
            except Exception:
                if clock.time() - started >= delay:
                    delay = self._first_delay  # it had recovered: a new crash starts over
                log.exception("loop %s crashed; restarting in %.1fs", name, delay)
            finally:
                settled.cancel()
            self._failing.add(name)
            await asyncio.sleep(delay)
            self.restarts += 1
            delay = min(delay * 2, self._max_delay)
