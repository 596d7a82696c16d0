"""A lane of a WebSocket connection: the responses of one `stream_id`, one after another.

A lane moves through three states:

    IDLE ──create──▶ RUNNING ──its last frame──▶ CLOSING ──task returns, nothing waits──▶ IDLE
                        ▲                            │
                        └──── the next waiting create┘

`RUNNING`: its response's last frame (the terminal event, or the error frame of a create that
failed) is not yet sent. `CLOSING`: it is, and the task is still closing the stream (storing
the response, remembering its chain on the connection, releasing the key's limits). A lane runs
its creates strictly in order; the next starts once the previous has closed, so a create that
continues the previous one (`previous_response_id`) finds its chain. A create that continues a
response of another lane (a fork: `stream_id` routes, `previous_response_id` is the lineage)
may be sent the moment that response's terminal event is read: one with a
`previous_response_id` first waits for the other lanes' `CLOSING` responses to close (bounded
by `--send-timeout`).

A create for a busy named lane waits in the lane's queue: at most `QUEUE_BOUND` of them, and
together with the other lanes' waiting creates at most the connection's byte budget
(`LaneHost.reserve`); past either it is refused with `lane_queue_full`, naming `stream_id`.
The unnamed lane (a create without `stream_id`) keeps the rule of a connection without lanes:
a create while its response is `RUNNING` is refused (`response_in_progress`), one while it is
`CLOSING` waits for the closing and then runs (an agent loop sends its next create the moment it
reads the terminal event).

Every frame of a named lane's response carries its `stream_id`, spliced into the event's bytes
(core/events/wsframe.py `tagged`); the unnamed lane sends the service's bytes untouched, through
the very same call as a connection without lanes, so echoing costs it nothing per event.
Each create runs as a steering `Run` (services/responses/steering.py), made by the connection
when the create starts (`LaneHost.begin`: a continuation of a response that waited for the
client's tools then inherits the steers queued there). A steered response whose automatic
successor follows stays `RUNNING` through its terminal event: the successor is the lane's
next response, not a create of the client's, so the unnamed lane refuses one meanwhile as it
would during any response. Once a response is over, `LaneHost.settle` ends its run (sending
the steer events that follow from it, before anything else of the lane) and hands back the
successor, which `run_next` puts ahead of the waiting creates: neither refused nor counted
against the bounds, and run as the `Run` it is (its steers keep the ids they were accepted
with).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.websockets import WebSocketDisconnect

from proxy.core import types as t
from proxy.core.errors import InvalidRequest, ProxyError
from proxy.core.events.wsframe import STREAM_ID, stream_tag, tagged
from proxy.services.responses.steering import Run

log = logging.getLogger("proxy.web")

# Creates one named lane holds waiting behind its running response: a pipelining client (an
# agent queueing its next turns) rarely needs more than a few; past it the client is told so
# rather than left to wonder why nothing runs.
QUEUE_BOUND = 16


class LaneState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"


class LaneHost(Protocol):
    """What a lane needs of its connection (web/socket/connection.py)."""

    def begin(self, body: dict[str, Any], stream_id: str | None) -> Run:
        """A client's create about to run on the lane: its steering run."""
        ...

    async def open(self, run: Run, size: int) -> t.EventBatches:
        """Runs a create (limits, history, fleet): its stream of event batches."""
        ...

    async def settle(self, run: Run) -> Run | None:
        """The run is over (its last frame sent): sends what its steers come to, and returns
        the automatic successor to run next on the lane, if one follows."""
        ...

    async def send(self, data: bytes) -> None:
        """One frame, whole, within the send watchdog."""
        ...

    async def fail(self, error: ProxyError, stream_id: str | None) -> None:
        """The error frame."""
        ...

    def forget(self, response_id: str) -> None:
        """Drops a response from the connection's memory of chains."""
        ...

    def reserve(self, size: int) -> bool:
        """Whether a create of `size` bytes may wait (then it holds them until it runs)."""
        ...

    def unreserve(self, size: int) -> None: ...

    async def after_closings(self, lane: Lane) -> None:
        """Waits, bounded, for the responses other lanes are closing."""
        ...

    def released(self, lane: Lane) -> None:
        """The lane is idle again, nothing waiting: the connection may forget it."""
        ...

    def broke(self, error: Exception) -> None:
        """A send failed (the client stopped reading, or left): the connection is over."""
        ...


@dataclass
class _Create:
    body: dict[str, Any]
    size: int  # the frame's bytes: a large create is parsed off the loop
    held: int = 0  # of the connection's budget for waiting creates, while it waits
    run: Run | None = None  # made already: the server's successor (its steers' ids inherited)


class Lane:
    """The responses of one `stream_id` (None: the connection's unnamed lane)."""

    def __init__(self, stream_id: str | None, host: LaneHost) -> None:
        self.stream_id = stream_id
        self.state = LaneState.IDLE
        self._host = host
        self._waiting: deque[_Create] = deque()
        self._task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()  # set while no response of the lane is open
        self._closed.set()
        self._tag = b"" if stream_id is None else stream_tag(stream_id)
        # Chosen once per lane, not per event: the unnamed lane's frames go out untouched.
        self._send: Callable[[bytes], Awaitable[None]] = (
            host.send if stream_id is None else self._send_tagged)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def offer(self, body: dict[str, Any], size: int = 0) -> None:
        """Runs a create now, or queues it behind the lane's response; raises why it cannot."""
        if self.state is LaneState.IDLE:
            self._start(_Create(body, size))
            return
        if self.stream_id is None:
            if self.state is LaneState.CLOSING and not self._waiting:
                self._waiting.append(_Create(body, size))
                return
            raise InvalidRequest(
                "A response is already in progress on this connection; send the next "
                "`response.create` after its terminal event, or give concurrent responses "
                "each a `stream_id`.", code="response_in_progress")
        if len(self._waiting) >= QUEUE_BOUND:
            raise self._full(f"already has {QUEUE_BOUND} creates waiting")
        if not self._host.reserve(size):
            raise self._full("cannot queue more: the creates waiting on this connection "
                             "would hold more than --max-body-bytes")
        self._waiting.append(_Create(body, size, held=size))

    def run_next(self, run: Run) -> None:
        """Runs `run` as this lane's next create, ahead of any waiting: the server's own
        successor of the lane's response, so never refused and not counted in the bounds."""
        create = _Create(run.body, 0, run=run)
        if self.state is LaneState.IDLE:
            self._start(create)
        else:
            self._waiting.appendleft(create)

    async def close(self) -> None:
        """Drops the waiting creates and cancels the running response (its stream closes,
        which aborts its upstream request)."""
        self.cancel()
        await self.settled()

    def cancel(self) -> None:
        self._drop_waiting()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def closed(self) -> None:
        """Returns once the lane's current response (if any) has closed."""
        await self._closed.wait()

    async def settled(self) -> None:
        """Waits for the lane's task to have returned (cancelled or not)."""
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await self._task

    def _full(self, why: str) -> InvalidRequest:
        return InvalidRequest(f"The lane '{self.stream_id}' {why}; send it once the lane's "
                              "responses have ended.", param=STREAM_ID, code="lane_queue_full")

    def _start(self, first: _Create) -> None:
        self.state = LaneState.RUNNING
        self._task = asyncio.create_task(self._drain(first), name="websocket-lane")

    def _drop_waiting(self) -> None:
        for waiting in self._waiting:
            self._host.unreserve(waiting.held)
        self._waiting.clear()

    async def _drain(self, create: _Create) -> None:
        """The lane's task: its creates one after another until none waits."""
        try:
            while True:
                self.state = LaneState.RUNNING
                self._closed.clear()
                if create.run is None and create.body.get("previous_response_id") is not None:
                    # It may continue a response another lane is closing: once closed, its
                    # chain is remembered (and stored), as on one lane; and its steers are
                    # settled, so a continuation of one that waited for the client's tools
                    # finds the input queued there. (A successor continues this lane's own
                    # response, closed already: it waits for no other lane.)
                    await self._host.after_closings(self)
                run = create.run or self._host.begin(create.body, self.stream_id)
                await self.respond(run, create.size)
                successor = await self._host.settle(run)
                self._closed.set()
                if successor is not None:
                    self.run_next(successor)
                if not self._waiting:
                    return
                create = self._waiting.popleft()
                self._host.unreserve(create.held)
        except Exception as error:  # `respond` lets only a failed send out
            # The client stopped reading or left: the connection ends, and every lane with it.
            self._host.broke(error)
        finally:
            self._drop_waiting()
            self._closed.set()
            self.state = LaneState.IDLE
            self._host.released(self)

    async def respond(self, run: Run, size: int = 0) -> None:
        """One response, from its create to its last frame; `CLOSING` once that is sent,
        unless an automatic successor follows it."""
        previous = run.body.get("previous_response_id")
        try:
            stream = await self._host.open(run, size)
            terminal = t.TERMINAL_EVENTS
            send = self._send
            try:
                async for batch in stream:
                    for kind, data in batch:
                        if kind in terminal and not run.successor_follows():
                            # Before the send: the client may answer the moment it reads it.
                            self.state = LaneState.CLOSING
                        await send(data)
            finally:
                # At once, also when cancelled: the turn's cleanup aborts the upstream request.
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except ProxyError as error:
            if isinstance(previous, str):
                self._host.forget(previous)  # a failed continuation: its entry is not trusted
            self.state = LaneState.CLOSING  # the error frame is this response's last frame
            await self._refused(run, error)
        except (asyncio.CancelledError, TimeoutError, WebSocketDisconnect):
            raise
        except Exception:
            log.exception("unhandled error on a WebSocket response")
            self.state = LaneState.CLOSING
            await self._refused(run, ProxyError("The server had an error while processing "
                                                "your request."))

    async def _refused(self, run: Run, error: ProxyError) -> None:
        run.fail(error.message)
        # A successor the server started answers for its steers (`response.steer.failed`,
        # from `settle`): the client sent no create for an error frame to answer.
        if not run.automatic:
            await self._host.fail(error, self.stream_id)

    async def _send_tagged(self, data: bytes) -> None:
        await self._host.send(tagged(data, self._tag))
