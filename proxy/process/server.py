"""uvicorn's `Server` with a drain in front of its shutdown (SIGTERM, docs/contract.md
"Operations").

uvicorn on its own answers SIGTERM by closing the listening socket at once, then waits up to
`timeout_graceful_shutdown` for the open connections and cancels what is left. That keeps open
streams going but cannot say "not ready" (the port is gone) nor refuse politely. So the first
SIGTERM or SIGINT starts the app's drain instead (services/process/drain.py: /readyz 503, new
requests refused with 503, streams finishing within the grace); uvicorn's own shutdown begins only
once the drain is over, and then finds little left: its socket close, its wait for connections
(bounded by `timeout_graceful_shutdown`) and the lifespan shutdown run as they always do.

A second signal skips the rest of the drain: uvicorn's normal path (a signal-terminated exit).
A drained exit is a clean one (exit code 0): the signal was handled, so it is not re-raised.

Under `serve --workers N` (prefork.py) each child is given its supervisor's pid: a child whose
parent changed (the supervisor was killed outright) drains as if signalled, so no orphan keeps
serving. Checked on uvicorn's tick (every 0.1 s): one `getppid` system call, off the hot path.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

import uvicorn

log = logging.getLogger("proxy")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config,
                 drain: Callable[[], Coroutine[Any, Any, None]],
                 parent_pid: int | None = None) -> None:
        super().__init__(config)
        self._drain = drain
        self._parent_pid = parent_pid
        self._drain_requested = False
        self._draining: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_requested or not self.started:
            super().handle_exit(sig, frame)  # a second signal, or before serving: at once
            return
        # A signal handler may run between any two bytecodes of the loop: only a flag here;
        # the drain task starts at uvicorn's next tick (at most 0.1 s later).
        self._drain_requested = True

    async def on_tick(self, counter: int) -> bool:
        if (self._parent_pid is not None and not self._drain_requested
                and os.getppid() != self._parent_pid):
            log.warning("supervisor %d gone: draining", self._parent_pid)
            self._drain_requested = True
        if self._drain_requested and self._draining is None:
            log.info("signal received: draining before shutdown")
            self._draining = asyncio.create_task(self._drain(), name="drain")
        if self._draining is not None and self._draining.done():
            if not self._draining.cancelled() and self._draining.exception() is not None:
                log.error("drain failed", exc_info=self._draining.exception())
            return True
        return await super().on_tick(counter)
