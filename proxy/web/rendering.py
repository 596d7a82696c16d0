"""From service results to HTTP: JSON bodies and streams.

Streams go out through `EventStream` (web/eventstream.py): it listens for the client's
disconnect concurrently (so an upstream generation is aborted within moments, even while no chunk
is flowing) and sends keep-alive comment pings on silent streams. Our iterators yield ready-made
bytes (a frame, or several coalesced), which it writes unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from starlette.responses import Response

from proxy.services.passthrough import Relay
from proxy.web.eventstream import EventStream

# What a handler returns: a complete response, or a stream.
Reply = Response | EventStream


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
) -> EventStream:
    return EventStream(body, ping=ping, status=status, headers=headers)


def relay_response(relay: Relay, *, ping: float = 0) -> Reply:
    if relay.stream is not None:
        headers = {k: v for k, v in relay.headers.items() if k.lower() != "content-type"}
        return stream_response(relay.stream, headers=headers, status=relay.status, ping=ping)
    return Response(relay.body, status_code=relay.status, headers=relay.headers,
                    media_type=relay.media_type)
