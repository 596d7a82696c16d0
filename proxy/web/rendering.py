"""From service results to HTTP: JSON bodies and streams.

Streams go out through sse-starlette's `EventSourceResponse`: it listens for the client's
disconnect concurrently (so an upstream generation is aborted within moments, even while no chunk
is flowing), sends keep-alive comment pings on Responses streams, and ends streams on shutdown.
Our iterators yield ready-made bytes (a frame, or several coalesced), which it writes unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from sse_starlette import EventSourceResponse
from starlette.responses import Response

from proxy.services.passthrough import Relay


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=dict(headers or {}),
                    media_type="application/json")


def stream_response(
    body: AsyncIterator[bytes],
    *,
    ping: float = 0,
    headers: Mapping[str, str] | None = None,
    status: int = 200,
) -> Response:
    return EventSourceResponse(
        body, status_code=status, headers=dict(headers or {}), ping=ping,
        ping_message_factory=None, send_timeout=None,
    )


def relay_response(relay: Relay) -> Response:
    if relay.stream is not None:
        headers = {k: v for k, v in relay.headers.items() if k.lower() != "content-type"}
        return stream_response(relay.stream, headers=headers, status=relay.status)
    return Response(relay.body, status_code=relay.status, headers=relay.headers,
                    media_type=relay.media_type)
