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
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger("proxy.tasks")
T = TypeVar("T")


class TaskSet:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def shielded(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> T:
        """Run `coro` to completion even if the caller is cancelled meanwhile (the caller then
        sees its CancelledError at once; the work goes on)."""
        return await asyncio.shield(self.spawn(coro, name=name))

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

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
