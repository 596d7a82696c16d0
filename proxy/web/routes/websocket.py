"""WebSocket mode of `/v1/responses`: the same create service, another transport.

A client's `response.create` frame runs exactly as a streamed HTTP create
(`runtime.services.responses.create`); each event of the batches it yields goes out as one text
frame, its JSON as the service encoded it (core/types.py `EventBatch`): nothing is parsed or encoded
again per event, and the objects and sequence numbers are those of SSE. The terminal event is
known by its type.

Per connection: one response in flight (a second create meanwhile gets an error frame; see
`SocketState` for the create that arrives while the previous response is still closing), a
bounded memory of the last responses so `store: false` chains continue
(services/responses/localchains.py), one send at a time under `--send-timeout` (a reader that stops
reading loses the connection, as a stalled SSE client does), frames up to `--max-body-bytes`
bytes (a larger one gets a 413 error frame, up to uvicorn's `ws_max_size` past which the
transport closes the socket with 1009: see proxy/cli.py), and a life of `--ws-max-age`
seconds. One key holds at most `--ws-max-connections-per-key` sockets open in one process
(core/policy/keyslots.py); one more handshake is refused with a 429. Pings are uvicorn's
(`ws_ping_interval`). A client that leaves cancels its response, which closes the upstream
request as for an HTTP client.

Steering (`response.steer`): services/responses/steering.py holds the connection's queue and
decides; this route sends what it answers, stops the steered turn at its safe boundary and runs
the automatic successor after the steered response's last frame, as part of the same response
task (the socket stays `RUNNING` across both).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from proxy.core import types as t
from proxy.core.errors import (
    InvalidRequest,
    PayloadTooLarge,
    ProxyError,
    RateLimited,
    StoreUnavailable,
    failure_cause,
)
from proxy.core.events.steer import STEER
from proxy.core.events.wsframe import CREATE, frame_over, parse_frame
from proxy.services.process import offload
from proxy.services.responses.localchains import LocalChains
from proxy.services.responses.steering import Run, Steering
from proxy.web.errors import error_response
from proxy.web.limiting import metering
from proxy.web.middleware.auth import PUBLIC_TENANT
from proxy.web.state import runtime_of

if TYPE_CHECKING:  # the composition root sits above web/: a name for types only
    from proxy.runtime import Runtime

log = logging.getLogger("proxy.web")

MAX_AGE_CODE = "websocket_connection_limit_reached"


def error_frame(error: ProxyError) -> bytes:
    return orjson.dumps({"type": "error", "status": error.status, **error.body()})


class SocketState(enum.Enum):
    """Where a connection's response is; moves idle → running → closing → idle.

    A response's last frame (its terminal event, or the error frame of a create that failed)
    goes out before its task has finished: closing the stream then stores the response, writes
    the connection's memory of the chain and releases the key's limits. An agent loop sends its
    next `response.create` the moment it reads that frame, so a create that finds the socket
    `CLOSING` waits for the closing (bounded by `--send-timeout`, the time a stream's write may
    take) and then runs; only a create while the previous one is genuinely `RUNNING` (its last
    frame not yet sent) is refused with `response_in_progress`. A steered response whose
    successor follows stays `RUNNING` through its terminal event: the successor is part of the
    same response task, not a create the client sends.
    """

    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"


class _Connection:
    """One accepted socket: its sends, its memory and its response in flight."""

    def __init__(self, websocket: WebSocket, runtime: Runtime) -> None:
        self.websocket = websocket
        self.runtime = runtime
        self.tenant = str(websocket.scope.get("state", {}).get("tenant", PUBLIC_TENANT))
        self.local = LocalChains()
        self.steering = Steering(max_items=runtime.settings.limits.max_input_items)
        self.state = SocketState.IDLE
        self.current: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()  # events and error frames never interleave mid-frame

    async def send(self, data: bytes) -> None:
        """One frame, within `--send-timeout`; a reader that stopped raises TimeoutError."""
        # `asyncio.timeout`, not `wait_for`: no task per frame on the per-event path.
        async with self._sending, asyncio.timeout(self.runtime.settings.streams.send_timeout):
            await self.websocket.send_text(data.decode())

    async def fail(self, error: ProxyError) -> None:
        if isinstance(error, StoreUnavailable):
            # Counted and logged as the HTTP path does (web/errors.py): the cause named.
            self.runtime.metrics.store_error()
            log.warning("store unavailable on WebSocket %s: %s", self.websocket.url.path,
                        failure_cause(error))
        await self.send(error_frame(error))

    async def _respond(self, body: dict[str, Any], size: int = 0) -> None:
        """The response task: running until its last frame, closing until it returns. A
        steered response's successor runs here too, right after it."""
        try:
            run: Run | None = self.steering.begin(body)
            while run is not None:
                await self.run(run, size)
                settled = self.steering.end(run)
                for event in settled.events:
                    await self.send(orjson.dumps(event))
                run, size = settled.successor, 0
        finally:
            self.state = SocketState.IDLE

    async def steer(self, frame: dict[str, Any], size: int) -> None:
        """A `response.steer`: its answer first, then the steered turn asked to stop."""
        events, turn = await self.steering.steer(frame, size)
        for event in events:
            await self.send(orjson.dumps(event))
        if turn is not None:
            await turn.steer()

    async def run(self, run: Run, size: int = 0) -> None:
        """`size`: the frame's length, by which the create's parse and walks leave the loop."""
        body = run.body
        previous = body.get("previous_response_id")
        try:
            # Per-key limits as for a streamed HTTP create: a stream slot, usage counted.
            responses = self.runtime.services.responses
            async with responses.setting_up(), metering(self.websocket, hold=True) as meter:
                outcome = await responses.create(
                    self.tenant, {**body, "stream": True}, meter=meter, local=self.local,
                    size=size, steering=run)
            assert outcome.stream is not None  # a streamed create always streams
            stream = outcome.stream
            terminal = t.TERMINAL_EVENTS
            try:
                async for batch in stream:
                    for kind, data in batch:
                        if kind in terminal and not run.successor_follows():
                            # Before the send: the client may answer the moment it reads it.
                            self.state = SocketState.CLOSING
                        await self.send(data)
            finally:
                # At once, also when cancelled: the turn's cleanup aborts the upstream request.
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except ProxyError as error:
            if isinstance(previous, str):
                self.local.evict(previous)  # a failed continuation: its entry is not trusted
            self.state = SocketState.CLOSING  # the error frame is this response's last frame
            run.fail(error.message)
            if not run.automatic:  # a successor's failure is its steers' (steering.py)
                await self.fail(error)
        except (asyncio.CancelledError, TimeoutError, WebSocketDisconnect):
            raise
        except Exception:
            log.exception("unhandled error on a WebSocket response")
            self.state = SocketState.CLOSING
            await self.fail(ProxyError("The server had an error while processing your "
                                       "request."))

    def busy(self) -> bool:
        return self.current is not None and not self.current.done()

    async def _closed(self) -> None:
        """Waits, bounded, for a `CLOSING` response's task to return."""
        task = self.current
        if task is None:
            return
        await asyncio.wait({task}, timeout=self.runtime.settings.streams.send_timeout)
        if task.done():
            _raise_transport_failure(task)  # its last send failed: the connection is over

    async def receive(self, text: str | None, data: bytes | None) -> None:
        raw = text if text is not None else data
        if raw is None:
            return
        if frame_over(raw, self.runtime.settings.limits.max_body_bytes):
            # 413 as for an HTTP body over the limit; the code says it was a frame.
            await self.fail(PayloadTooLarge("The frame is larger than the maximum request size.",
                                            code="frame_too_large"))
            return
        try:
            kind, body = await offload.run(len(raw), parse_frame, raw)  # large: off the loop
        except ProxyError as error:
            await self.fail(error)
            return
        if kind == STEER:
            await self.steer(body, len(raw))
            return
        if kind != CREATE:
            return  # e.g. Codex's `response.processed`, `response.append`: not ours to refuse
        if self.state is SocketState.CLOSING:
            await self._closed()
        if self.state is not SocketState.IDLE:
            await self.fail(InvalidRequest(
                "A response is already in progress on this connection; send the next "
                "`response.create` after its terminal event.", code="response_in_progress"))
            return
        self.state = SocketState.RUNNING
        self.current = asyncio.create_task(self._respond(body, len(raw)),
                                           name="websocket-response")

    async def close_current(self) -> None:
        if self.current is not None and not self.current.done():
            self.current.cancel()  # closes the turn, which aborts its upstream request
        if self.current is not None:
            with contextlib.suppress(BaseException):
                await self.current


async def responses_socket(websocket: WebSocket) -> None:
    runtime = runtime_of(websocket)
    tenant = str(websocket.scope.get("state", {}).get("tenant", PUBLIC_TENANT))
    # A place among the key's sockets in this process for the connection's whole life, freed
    # however it ends (the `with`): a key cannot hold every descriptor for `--ws-max-age`.
    with runtime.process.sockets.taken(tenant) as free:
        if not free:
            await _refuse(websocket, RateLimited(
                f"This key has {runtime.process.sockets.per_key} WebSocket connections open "
                "on this server (--ws-max-connections-per-key); close one, or retry later.",
                retry_after=1))
            return
        await _serve(websocket, runtime)


async def _refuse(websocket: WebSocket, error: ProxyError) -> None:
    """Refused at the handshake with the error as an HTTP response (the WebSocket Denial
    Response extension, which uvicorn offers); a server without it gets the error frame on an
    accepted socket, closed at once (1008, policy)."""
    log.info("websocket handshake refused: %s", error.code)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error))
        return
    await websocket.accept()
    await websocket.send_text(error_frame(error).decode())
    await websocket.close(code=1008)


async def _serve(websocket: WebSocket, runtime: Runtime) -> None:
    await websocket.accept()
    connection = _Connection(websocket, runtime)
    loop = asyncio.get_running_loop()
    closes_at = loop.time() + runtime.settings.streams.ws_max_age
    # One receive stays pending across turns of the loop, so no frame is lost while the loop
    # wakes up for a response that ended.
    receiving: asyncio.Future[Any] | None = None
    try:
        while True:
            remaining = closes_at - loop.time()
            if remaining <= 0:
                await connection.close_current()
                await connection.fail(ProxyError(
                    "The WebSocket connection reached its maximum age; open a new one.",
                    code=MAX_AGE_CODE, status=400))
                await websocket.close(code=1000)
                return
            if receiving is None:
                receiving = asyncio.ensure_future(websocket.receive())
            waits: set[asyncio.Future[Any]] = {receiving}
            current = connection.current
            if current is not None and not current.done():
                waits.add(current)
            done, _ = await asyncio.wait(waits, timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            if current is not None and current in done:
                _raise_transport_failure(current)
            if receiving not in done:
                continue
            message = receiving.result()
            receiving = None
            if message["type"] == "websocket.disconnect":
                return
            await connection.receive(message.get("text"), message.get("bytes"))
    except TimeoutError:
        # Once per connection, not per event: the response's upstream request is aborted below.
        log.warning("WebSocket client stopped reading for %ss; connection dropped",
                    runtime.settings.streams.send_timeout)
    except (WebSocketDisconnect, RuntimeError):
        return  # a socket already gone
    finally:
        if receiving is not None and not receiving.done():
            receiving.cancel()
        await connection.close_current()


def _raise_transport_failure(task: asyncio.Task[None]) -> None:
    """A response task ends on its own, or on a send that failed: that ends the connection."""
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


routes = [WebSocketRoute("/v1/responses", responses_socket)]
