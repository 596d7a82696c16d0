"""WebSocket mode of `/v1/responses`: the same create service, another transport.

A client's `response.create` frame runs exactly as a streamed HTTP create
(`services.responses.create`); each event of the batches it yields goes out as one text
frame, its JSON as the service encoded it (core/types.py `EventBatch`): nothing is parsed or encoded
again per event, and the objects and sequence numbers are those of SSE. The terminal event is
known by its type.

This module is the route: the handshake, the key's bound on sockets and the connection's life.
What happens on an accepted socket is web/socket/: the frames, the lanes (`stream_id`: creates
of one lane in order, lanes side by side, at most `--ws-max-lanes`; without `stream_id` one
response in flight, a second create meanwhile gets an error frame), steering (`response.steer`:
a running response ended at a safe boundary and continued on its lane), a bounded memory of the last
responses so `store: false` chains continue (services/responses/localchains.py), one send at a
time under `--send-timeout` (a reader that stops reading loses the connection, as a stalled SSE
client does), frames up to `--max-body-bytes` bytes (a larger one gets a 413 error frame, up to
uvicorn's `ws_max_size` past which the transport closes the socket with 1009: see
proxy/cli.py).

Per connection, a life of `--ws-max-age` seconds. One key holds at most
`--ws-max-connections-per-key` sockets open in one process (core/policy/keyslots.py); one more
handshake is refused with a 429. Pings are uvicorn's (`ws_ping_interval`). A client that leaves
cancels every lane's response, which closes their upstream requests as for an HTTP client.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from proxy.core.errors import ProxyError, RateLimited
from proxy.core.events.wsframe import error_frame
from proxy.web.errors import error_response
from proxy.web.middleware.auth import PUBLIC_TENANT
from proxy.web.socket.connection import Connection
from proxy.web.state import WebState, state_of

log = logging.getLogger("proxy.web")

MAX_AGE_CODE = "websocket_connection_limit_reached"


async def responses_socket(websocket: WebSocket) -> None:
    web = state_of(websocket)
    tenant = str(websocket.scope.get("state", {}).get("tenant", PUBLIC_TENANT))
    # A place among the key's sockets in this process for the connection's whole life, freed
    # however it ends (the `with`): a key cannot hold every descriptor for `--ws-max-age`.
    with web.sockets.taken(tenant) as free:
        if not free:
            await _refuse(websocket, RateLimited(
                f"This key has {web.sockets.per_key} WebSocket connections open "
                "on this server (--ws-max-connections-per-key); close one, or retry later.",
                retry_after=1))
            return
        await _serve(websocket, web)


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


async def _serve(websocket: WebSocket, web: WebState) -> None:
    await websocket.accept()
    connection = Connection(websocket, web.responses, web.streams, web.limits, web.metrics)
    loop = asyncio.get_running_loop()
    closes_at = loop.time() + web.streams.ws_max_age
    # One receive stays pending across turns of the loop, so no frame is lost while the loop
    # wakes up for a lane whose send failed.
    receiving: asyncio.Future[Any] | None = None
    try:
        while True:
            remaining = closes_at - loop.time()
            if remaining <= 0:
                await connection.close()
                await connection.fail(ProxyError(
                    "The WebSocket connection reached its maximum age; open a new one.",
                    code=MAX_AGE_CODE, status=400))
                await websocket.close(code=1000)
                return
            if receiving is None:
                receiving = asyncio.ensure_future(websocket.receive())
            done, _ = await asyncio.wait({receiving, connection.broken}, timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            if connection.failure is not None:
                raise connection.failure  # a lane's send failed: the connection is over
            if receiving not in done:
                continue
            message = receiving.result()
            receiving = None
            if message["type"] == "websocket.disconnect":
                return
            await connection.receive(message.get("text"), message.get("bytes"))
    except TimeoutError:
        # Once per connection, not per event: every lane's upstream request is aborted below.
        log.warning("WebSocket client stopped reading for %ss; connection dropped",
                    web.streams.send_timeout)
    except (WebSocketDisconnect, RuntimeError):
        return  # a socket already gone
    finally:
        if receiving is not None and not receiving.done():
            receiving.cancel()
        await connection.close()


routes = [WebSocketRoute("/v1/responses", responses_socket)]
