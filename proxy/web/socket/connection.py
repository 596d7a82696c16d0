"""One accepted WebSocket connection: frames in, dispatched by type; frames out, one at a time;
its lanes; its memory of chains.

A frame is measured (`--max-body-bytes`, in bytes: a larger one gets a 413 error frame), parsed
(off the loop when large) and handed to the handler of its `type` in `handlers` (a type without
one is ignored). `response.create` runs on the lane its `stream_id` names, or on the unnamed lane
(web/socket/lanes.py); lanes run beside each other, at most `--ws-max-lanes` named ones at once
(one more is refused, naming `stream_id`); the unnamed lane is the connection's own, as it was
before lanes, and never counts against that bound.

Sends go out one at a time (a lock), so frames of lanes interleave whole, each within
`--send-timeout`: a reader that stops reading loses the connection, every lane's response with
it, as a stalled SSE client does. A failed send from any lane reaches the connection's loop
through `broken`. The memory of the last responses (services/responses/localchains.py) is the
connection's, shared by its lanes: a lane's create may continue a `store: false` response made
on another lane.

Steering (`response.steer`) is the connection's too (services/responses/steering.py): one
`Steering` knows every lane's running and recently ended responses, so input queued on a
response that waits for the client's tools outlives its lane (a lane is forgotten once idle).
A steer frame names no lane: the steered response's lane is the one its answers echo (the
steer events carry their `stream_id` as steering makes them, so they go out as they are).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.websockets import WebSocket

from proxy.core import types as t
from proxy.core.errors import (
    InvalidRequest,
    PayloadTooLarge,
    ProxyError,
    StoreUnavailable,
    failure_cause,
)
from proxy.core.events.steer import STEER
from proxy.core.events.wsframe import (
    CREATE,
    STREAM_ID,
    create_body,
    error_frame,
    frame_over,
    parse_frame,
    take_stream_id,
)
from proxy.services.process import offload
from proxy.services.responses.create import ResponsesService
from proxy.services.responses.localchains import LocalChains
from proxy.services.responses.steering import Run, Steering
from proxy.settings.groups import LimitSettings, StreamSettings
from proxy.telemetry.metrics import Metrics
from proxy.web.limiting import metering
from proxy.web.middleware.auth import PUBLIC_TENANT
from proxy.web.socket.lanes import Lane, LaneState

log = logging.getLogger("proxy.web")

# A frame's handler: the frame without its `type`, and its size in bytes.
FrameHandler = Callable[[dict[str, Any], int], Awaitable[None]]


class Connection:
    """One accepted socket: its sends, its lanes, its memory of chains."""

    def __init__(self, websocket: WebSocket, responses: ResponsesService,
                 streams: StreamSettings, limits: LimitSettings,
                 metrics: Metrics | None = None) -> None:
        self.websocket = websocket
        self.tenant = str(websocket.scope.get("state", {}).get("tenant", PUBLIC_TENANT))
        self.local = LocalChains()
        self.lanes: dict[str | None, Lane] = {}  # None: the unnamed lane
        self.steering = Steering(max_items=limits.max_input_items)
        # Set once a lane's send failed; `failure` says how (the connection's loop raises it).
        self.broken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.failure: Exception | None = None
        # Frame type -> its handler; a type without one is ignored (Codex's
        # `response.processed`, `response.append`: not ours to refuse).
        self.handlers: dict[str, FrameHandler] = {CREATE: self.create, STEER: self.steer}
        self._responses = responses
        self._streams = streams
        self._limits = limits
        self._metrics = metrics
        self._sending = asyncio.Lock()  # frames never interleave mid-frame
        self._queued_bytes = 0  # the frames of the creates waiting on all lanes

    # -- frames in -------------------------------------------------------------------------
    async def receive(self, text: str | None, data: bytes | None) -> None:
        raw = text if text is not None else data
        if raw is None:
            return
        if frame_over(raw, self._limits.max_body_bytes):
            # 413 as for an HTTP body over the limit; the code says it was a frame.
            await self.fail(PayloadTooLarge("The frame is larger than the maximum request size.",
                                            code="frame_too_large"))
            return
        try:
            kind, frame = await offload.run(len(raw), parse_frame, raw)  # large: off the loop
        except ProxyError as error:
            await self.fail(error)
            return
        handler = self.handlers.get(kind)
        if handler is not None:
            await handler(frame, len(raw))

    async def create(self, frame: dict[str, Any], size: int) -> None:
        """`response.create`: runs on its lane, now or after the lane's earlier creates."""
        try:
            stream_id = take_stream_id(frame)
        except ProxyError as error:
            await self.fail(error)  # no lane to name: the one it gave is no lane
            return
        try:
            body = create_body(frame)  # before the lane: a refused create makes none
            self.lane(stream_id).offer(body, size)
        except ProxyError as error:
            await self.fail(error, stream_id)

    async def steer(self, frame: dict[str, Any], size: int) -> None:
        """`response.steer`: its answer first, then the steered turn asked to stop (at its
        next safe boundary, services/generation/boundary.py)."""
        events, turn = await self.steering.steer(frame, size)
        for event in events:
            await self.send(orjson.dumps(event))
        if turn is not None:
            await turn.steer()

    def lane(self, stream_id: str | None) -> Lane:
        """The lane of `stream_id`, made when it has no response running or waiting."""
        lane = self.lanes.get(stream_id)
        if lane is not None:
            return lane
        named = len(self.lanes) - (None in self.lanes)
        if stream_id is not None and named >= self._streams.ws_max_lanes:
            raise InvalidRequest(
                f"This connection already runs {named} lanes, the most it may "
                "(--ws-max-lanes); send this create on one of them, or once one has ended.",
                param=STREAM_ID, code="too_many_lanes")
        lane = self.lanes[stream_id] = Lane(stream_id, self)
        return lane

    # -- what a lane needs (web/socket/lanes.py LaneHost) ------------------------------------
    def begin(self, body: dict[str, Any], stream_id: str | None) -> Run:
        # The run's body keeps its lane: steer events echo it, a successor inherits it.
        return self.steering.begin(body if stream_id is None else {**body, STREAM_ID: stream_id})

    async def open(self, run: Run, size: int) -> t.EventBatches:
        """A create run as a streamed HTTP create is: per-key limits (a stream slot, usage
        counted), the process's set-up gate, the connection's memory of chains; told its
        steering run, so a steer reaches its turn."""
        body = {key: value for key, value in run.body.items() if key != STREAM_ID}
        responses = self._responses
        async with responses.setting_up(), metering(self.websocket, hold=True) as meter:
            outcome = await responses.create(
                self.tenant, {**body, "stream": True}, meter=meter, local=self.local,
                size=size, steering=run)
        assert outcome.stream is not None  # a streamed create always streams
        return outcome.stream

    async def settle(self, run: Run) -> Run | None:
        settled = self.steering.end(run)
        for event in settled.events:  # each made with its lane's `stream_id` (steering.py)
            await self.send(orjson.dumps(event))
        return settled.successor

    async def send(self, data: bytes) -> None:
        """One frame, within `--send-timeout`; a reader that stopped raises TimeoutError."""
        # `asyncio.timeout`, not `wait_for`: no task per frame on the per-event path.
        async with self._sending, asyncio.timeout(self._streams.send_timeout):
            await self.websocket.send_text(data.decode())

    async def fail(self, error: ProxyError, stream_id: str | None = None) -> None:
        if isinstance(error, StoreUnavailable) and self._metrics is not None:
            # Counted and logged as the HTTP path does (web/errors.py): the cause named.
            self._metrics.store_error()
            log.warning("store unavailable on WebSocket %s: %s", self.websocket.url.path,
                        failure_cause(error))
        await self.send(error_frame(error, stream_id))

    def forget(self, response_id: str) -> None:
        self.local.evict(response_id)

    def reserve(self, size: int) -> bool:
        # The waiting creates of all lanes hold at most what one request may carry: a client
        # cannot make the server keep lanes x QUEUE_BOUND large bodies waiting.
        if self._queued_bytes + size > self._limits.max_body_bytes:
            return False
        self._queued_bytes += size
        return True

    def unreserve(self, size: int) -> None:
        self._queued_bytes -= size

    async def after_closings(self, lane: Lane) -> None:
        closing = [other for other in self.lanes.values()
                   if other is not lane and other.state is LaneState.CLOSING]
        if not closing:
            return
        # Bounded as a send is: a closing that takes longer is a store in trouble, and the
        # create then runs and says what it finds (or does not).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._streams.send_timeout):
                for other in closing:
                    await other.closed()

    def released(self, lane: Lane) -> None:
        if self.lanes.get(lane.stream_id) is lane:
            del self.lanes[lane.stream_id]

    def broke(self, error: Exception) -> None:
        if not self.broken.done():
            self.failure = error
            self.broken.set_result(None)

    # -- the end ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Cancels every lane's response (each closes its upstream request) and waiting
        creates, all at once, and waits for them to have closed."""
        lanes = list(self.lanes.values())
        for lane in lanes:
            lane.cancel()
        for lane in lanes:
            await lane.settled()
