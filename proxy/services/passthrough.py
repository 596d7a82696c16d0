"""Chat Completions and the model list, passed through to the fleet.

The request body goes upstream byte for byte (we parse it once, only to route on `model`); the
answer comes back chunk for chunk as it arrives. If the upstream breaks off mid-stream, the client
gets the same in-band error frame vLLM itself sends (`data: {"error": ...}` then `[DONE]`), since
the HTTP status is already on the wire.

A stream's first chunk is awaited before the answer starts (bounded by `--first-token-timeout`
in the upstream client): vLLM sends its headers before it has queued the request, and while no
byte has reached our client a stalled replica can still be an HTTP error (504) instead of a
200 that never says anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import InvalidRequest, ProxyError
from proxy.core.jsonbody import parse_object
from proxy.services.admission import Admission
from proxy.services.fleet import Call, Fleet
from proxy.upstream import end_to_end_headers, map_transport_errors


@dataclass
class Relay:
    """An upstream answer on its way to the client: a complete body or a byte stream."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"


class Passthrough:
    def __init__(self, fleet: Fleet, admission: Admission | None = None) -> None:
        self._fleet = fleet
        self._admission = admission or Admission(fleet)

    async def chat_completions(self, body: bytes, tenant: str = "") -> Relay:
        request = parse_object(body)
        model = request.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequest("`model` is required and must be a string.", param="model")
        stream = request.get("stream") is True
        await self._admission.admit(model, tenant,
                                    priority=request.get("service_tier") == "priority")
        call = await self._fleet.open(model, "/v1/chat/completions", body, stream=stream)
        call = self._admission.watch(call)
        headers = end_to_end_headers(call.response.headers)
        if stream:
            chunks = call.response.aiter_raw()
            try:
                with map_transport_errors(call.replica.url):
                    first = await anext(chunks, b"")
            except BaseException:
                await call.aclose()
                raise
            return Relay(call.response.status_code, headers, stream=_relay(call, chunks, first),
                         media_type="text/event-stream")
        try:
            with map_transport_errors(call.replica.url):
                content = await call.response.aread()
        finally:
            await call.aclose()
        return Relay(call.response.status_code, headers, body=content)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": self._fleet.model_list()}


async def _relay(call: Call, chunks: AsyncIterator[bytes], first: bytes
                 ) -> AsyncIterator[bytes]:
    """`first`, then the chunks as they arrive. `finally` closes the upstream whatever ends us:
    the end of the stream, an error, or the client going away or no longer reading (the web
    layer cancels us, vLLM sees the close and aborts the generation)."""
    try:
        if first:
            yield first
        with map_transport_errors(call.replica.url):
            async for chunk in chunks:
                yield chunk
    except ProxyError as exc:
        frame = orjson.dumps({"error": {**exc.body()["error"], "code": exc.status}})
        yield b"data: " + frame + b"\n\ndata: [DONE]\n\n"
    finally:
        await call.aclose()
