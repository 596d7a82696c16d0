"""Chat Completions and the model list, passed through to the fleet.

The request body goes upstream as the client sent it, but for what the proxy owns: `cache_salt`
is the key's (core/policy/tenancy.py, a client's own salt combined into it), so no key shares vLLM's
prefix cache with another's; media URLs are fetched here and sent inline (services/fleet/media.py:
the fleet never fetches a URL a client named); `stream` is a JSON boolean (read as vLLM reads it).
The route parses it once and hands the object here (we route on `model`); the answer comes back
chunk for chunk as it arrives. If the upstream breaks off mid-stream, the client gets the same
in-band error frame vLLM itself sends (`data: {"error": ...}` then `[DONE]`), since the HTTP
status is already on the wire.

`stream` is read as vLLM reads it (a lax boolean: `"true"`, `1`, ...) and, when it was not a
JSON boolean, sent upstream as one: the proxy and the replica must agree on whether the answer
is a stream, or a stream would be relayed as one JSON body and never metered.

Per-key metering (services/metering/meter.py): a JSON answer is charged its `usage`; a stream its
usage chunk (asked for on the client's behalf and taken out again when it did not ask), or,
when the stream is cut before it, the frames it carried.

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
from proxy.core.policy.tenancy import CacheSalts
from proxy.core.request.fields import lax_bool
from proxy.services.fleet.fleet import Call
from proxy.services.fleet.gateway import Gateway
from proxy.services.fleet.media import MediaFetcher
from proxy.services.metering.meter import (
    Meter,
    tokens_of,
    usage_object_in_json,
    usage_object_in_sse,
)
from proxy.telemetry.tracing import note_answer
from proxy.upstream.client import end_to_end_headers, map_transport_errors


@dataclass
class Relay:
    """An upstream answer on its way to the client: a complete body or a byte stream."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"
    # The usage chunk the proxy asked for (a metered stream) and took out of the client's stream.
    usage: dict[str, Any] | None = None


class Passthrough:
    def __init__(self, gateway: Gateway, *, media: MediaFetcher | None = None,
                 salts: CacheSalts | None = None) -> None:
        self._gateway = gateway
        self._media = media  # None: bodies go as they are (tests of the relay alone)
        self._salts = salts or CacheSalts()

    async def chat_completions(self, request: dict[str, Any], tenant: str = "", *,
                               meter: Meter | None = None, size: int = 0) -> Relay:
        """`request`: the client's body, parsed (web/routes/passthrough.py; changed in place
        here: media inlined). `size`: its bytes, which choose whether its scan runs off the
        loop (services/process/offload.py). `meter`: the request's per-key account; when it
        counts tokens, a stream that did not ask for its usage chunk gets one from the
        upstream, taken out before the client."""
        meter = meter or Meter()
        model = request.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequest("`model` is required and must be a string.", param="model")
        if self._media is not None:
            await self._media.inline_chat(request.get("messages"), size=size)
        stream = bool(chat_stream(request))
        rewrite = stream is not request.get("stream", False)
        request = self._salts.salted(tenant, request)
        # The usage chunk is asked for (and taken out again) when the meter counts tokens, or
        # when tracing is on: the call's span carries them (proxy/telemetry/tracing.py).
        strip = (meter.counts or self._gateway.fleet.tracing is not None) and stream \
            and not _asks_usage(request)
        if strip:
            options = request.get("stream_options")
            request["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                         "include_usage": True}
        if rewrite:
            request["stream"] = stream
        body = orjson.dumps(request)  # once, with everything above
        priority = request.get("service_tier") == "priority" and self._gateway.grants(tenant)
        call = await self._gateway.open(model, tenant, body, stream=stream, priority=priority)
        headers = end_to_end_headers(call.response.headers)
        if stream:
            chunks = call.response.aiter_raw()
            try:
                with map_transport_errors(call.replica.url):
                    first = await anext(chunks, b"")
            except BaseException:
                await call.aclose()
                raise
            relay = Relay(call.response.status_code, headers, media_type="text/event-stream")
            relay.stream = _relay(call, chunks, first, relay)
            if strip:
                relay.stream = _without_usage(relay, relay.stream)
            meter.track(lambda: tokens_of(relay.usage))
            relay.stream = meter.stream(relay.stream, prompt_bytes=len(body))
            return relay
        try:
            with map_transport_errors(call.replica.url):
                content = await call.response.aread()
            # One parse of the answer for the span (before `aclose` ends it) and the meter.
            ok = call.response.status_code == 200
            usage = usage_object_in_json(content) if ok else None
            if call.span is not None and ok:
                note_answer(call.span, usage, None)
        finally:
            await call.aclose()
        meter.track(lambda: tokens_of(usage))
        return Relay(call.response.status_code, headers, body=content)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": self._gateway.fleet.model_list()}


async def _relay(call: Call, chunks: AsyncIterator[bytes], first: bytes, relay: Relay
                 ) -> AsyncIterator[bytes]:
    """`first`, then the chunks as they arrive. `finally` closes the upstream whatever ends us:
    the end of the stream, an error, or the client going away or no longer reading (the web
    layer cancels us, vLLM sees the close and aborts the generation). Traced: the call's span
    gets the usage, the one taken out (`relay.usage`) or else the one in the last chunks the
    client asked for; per chunk one check (and, tracing on, the last two chunks kept)."""
    span, previous, last = call.span, b"", first
    try:
        if first:
            yield first
        with map_transport_errors(call.replica.url):
            async for chunk in chunks:
                if span is not None:
                    previous, last = last, chunk
                yield chunk
    except ProxyError as exc:
        frame = orjson.dumps({"error": {**exc.body()["error"], "code": exc.status}})
        yield b"data: " + frame + b"\n\ndata: [DONE]\n\n"
    finally:
        if span is not None:
            note_answer(span, relay.usage or usage_object_in_sse(previous + last), None)
        await call.aclose()


def chat_stream(request: dict[str, Any]) -> bool | None:
    """A chat request's `stream`, read as vLLM reads it (core/request/fields.py `lax_bool`)."""
    return lax_bool(request, "stream")


def _asks_usage(request: dict[str, Any]) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


# Only the usage chunk has an empty `choices` list (vLLM, OpenAI): the one frame to take out.
_USAGE_CHUNK = b'"choices":[]'


async def _without_usage(relay: Relay, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks` without the usage chunk, which is kept on `relay.usage`. Frames split across
    reads are joined first (vLLM writes whole frames, so this rarely holds anything back); per
    chunk one search for the frame end and one for the marker, nothing parsed."""
    pending = b""
    try:
        async for chunk in chunks:
            data = pending + chunk if pending else chunk
            end = data.rfind(b"\n\n")
            cut = end + 2 if end >= 0 else 0
            whole, pending = data[:cut], data[cut:]
            if _USAGE_CHUNK in whole:
                whole = _take_usage(relay, whole)
            if whole:
                yield whole
        if pending:
            yield pending
    finally:
        await _close(chunks)


def _take_usage(relay: Relay, whole: bytes) -> bytes:
    kept = []
    for frame in whole.split(b"\n\n"):
        # `find`, not `in` (core/events/sse.py `DataDecoder.feed` says why)
        if frame.find(_USAGE_CHUNK) >= 0 and frame.startswith(b"data:"):
            try:
                data = orjson.loads(frame[5:])
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and data.get("choices") == [] and data.get("usage"):
                relay.usage = data["usage"]
                continue
        kept.append(frame)
    return b"\n\n".join(kept)


async def _close(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
