"""From service results to HTTP: JSON bodies and streams.

Streams go out through `EventStream` (web/eventstream.py): it listens for the client's
disconnect concurrently (so an upstream generation is aborted within moments, even while no chunk
is flowing) and sends keep-alive comment pings on silent streams. A Responses stream is event
batches, framed here as SSE (core/events/sse.py `frames`), one write per batch: this is the only
place Responses events become SSE bytes. A chat stream passed through is bytes, written unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from proxy.core.events.encoding import ends_stream
from proxy.core.events.sse import frames
from proxy.core.types import EventBatches
from proxy.services.fleet.passthrough import Relay
from proxy.web.eventstream import EventStream
from proxy.web.ticks import Ticks

# What a handler returns: a complete response, or a stream.
Reply = Response | EventStream


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=dict(headers or {}),
                    media_type="application/json")


def stream_response(
    events: EventBatches,
    *,
    ping: float = 0,
    send_timeout: float | None = None,
    ticks: Ticks | None = None,
    headers: Mapping[str, str] | None = None,
    status: int = 200,
) -> EventStream:
    """A Responses stream as SSE: each batch framed as one write, the terminal one with the
    body's end. `send_timeout` None: the serving app's (read from the scope: ~1-3 µs a stream
    that a route holding its settings passes instead). `ticks`: the app's (web/ticks.py)."""
    return EventStream(events, ping=ping, status=status, headers=headers, encode=frames,
                       last=ends_stream, send_timeout=send_timeout, ticks=ticks)


def relay_response(relay: Relay, *, ping: float = 0, ticks: Ticks | None = None) -> Reply:
    if relay.stream is not None:
        headers = {k: v for k, v in relay.headers.items() if k.lower() != "content-type"}
        return EventStream(relay.stream, ping=ping, status=relay.status, headers=headers,
                           ticks=ticks)
    return Response(relay.body, status_code=relay.status, headers=relay.headers,
                    media_type=relay.media_type)
