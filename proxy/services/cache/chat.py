"""`/v1/chat/completions` through the response cache, around the pass-through.

A hit never reaches the fleet: JSON clients get the cached completion with a new id and time,
stream clients the same completion as a complete chunk stream ending in `[DONE]`
(core/cache/completion.py). A miss is the plain pass-through; when its answer may be kept, the
non-streamed body is offered to the cache as it is, and a stream's bytes are collected as they
pass (one list append per chunk, nothing parsed) and folded into a completion once it ended.
A stream the client left, one cut by an error frame, or one bigger than the bound is not kept.

Metering (services/metering/meter.py) is the pass-through's on a miss (the usage chunk asked for
when the key counts tokens is folded into the kept completion, so a later hit knows its
size); a hit is charged the cached completion's usage, or, kept without one, the frames it
sends: what reached the client counts whether or not a replica generated it.

The route parses the body once (web/routes/passthrough.py); the cache keys that object
before the pass-through inlines its media into it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from proxy.core.cache.completion import chunks, fold
from proxy.core.cache.key import ROUTE_CHAT, Directives, chat_material
from proxy.core.events.sse import DataDecoder
from proxy.services.cache.responses import HEADER, HIT, Lookup, ResponseCache
from proxy.services.fleet.passthrough import Passthrough, Relay, chat_stream
from proxy.services.metering.meter import Meter, estimate, tokens_of

# A stream's raw SSE is several times its folded completion (each token carries its chunk's
# envelope): collect up to this many times the entry bound, then give up on keeping it.
RAW_PER_ENTRY_BYTE = 8


class CachedChat:
    def __init__(self, passthrough: Passthrough, cache: ResponseCache | None, *,
                 max_entry_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self._passthrough = passthrough
        self._cache = cache
        self._max_raw = max_entry_bytes * RAW_PER_ENTRY_BYTE
        self._clock = clock

    async def chat_completions(self, request: dict[str, Any], tenant: str,
                               directives: Directives, *, meter: Meter | None = None,
                               size: int = 0) -> Relay:
        """`request`: the client's body, parsed once by the route; `size`: its bytes (a large
        body is keyed off the loop; a hit without a usage is estimated from them)."""
        meter = meter or Meter()
        cache = self._cache
        if cache is None or not cache.enabled:
            return await self._passthrough.chat_completions(request, tenant, meter=meter,
                                                            size=size)
        eligible = isinstance(request.get("model"), str) and not request.get("logprobs")
        stream = bool(chat_stream(request))
        wants_usage = stream and _include_usage(request)
        # Keyed before the pass-through changes `request` in place (media inlined).
        found = await cache.lookup(tenant, ROUTE_CHAT, chat_material(request), directives,
                                   eligible=eligible,
                                   usable=_has_usage if wants_usage else None, size=size)
        if found.hit:
            return self._hit(found, stream, wants_usage, meter, size)
        relay = await self._passthrough.chat_completions(request, tenant, meter=meter,
                                                        size=size)
        relay.headers.update(found.headers())
        if found.key is None or not found.directives.write:
            return relay
        if relay.stream is not None:
            relay.stream = self._collect(relay, relay.stream, tenant, found, cache)
        else:
            try:
                completion = orjson.loads(relay.body)
            except orjson.JSONDecodeError:
                return relay
            if isinstance(completion, dict):
                cache.keep(tenant, found, completion)
        return relay

    def _hit(self, found: Lookup, stream: bool, wants_usage: bool, meter: Meter,
             prompt_bytes: int) -> Relay:
        assert found.body is not None
        completion = {**found.body, "id": f"chatcmpl-{uuid.uuid4().hex}",
                      "created": int(self._clock())}
        headers = {HEADER: HIT}
        whole = orjson.dumps(completion)
        # Kept without a usage (by a request that did not count): estimated from the bytes.
        meter.track(lambda: tokens_of(completion.get("usage")) or estimate(prompt_bytes,
                                                                          len(whole)))
        if not stream:
            return Relay(200, headers, body=whole)
        sent = meter.stream(_once(chunks(completion, include_usage=wants_usage)))
        return Relay(200, headers, stream=sent, media_type="text/event-stream")

    async def _collect(self, relay: Relay, stream: AsyncIterator[bytes], tenant: str,
                       found: Lookup, cache: ResponseCache) -> AsyncIterator[bytes]:
        parts: list[bytes] | None = []
        size = 0
        # `aclosing`: a client that leaves closes us, and we close the pass-through at once
        # (its `finally` aborts the upstream, so vLLM stops generating).
        async with _closing(stream) as chunks_in:
            async for chunk in chunks_in:
                if parts is not None:
                    size += len(chunk)
                    if size > self._max_raw:
                        parts = None
                    else:
                        parts.append(chunk)
                yield chunk
        # Reached only when the stream ran to its end: a client that left never gets here.
        if parts is None:
            return
        decoder = DataDecoder()
        completion = fold(decoder.feed(b"".join(parts)) + decoder.flush())
        if completion is not None:
            if completion.get("usage") is None and relay.usage is not None:
                completion["usage"] = relay.usage  # the usage chunk metering took out
            cache.keep(tenant, found, completion)


def _include_usage(request: dict[str, Any]) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _has_usage(completion: dict[str, Any]) -> bool:
    """A stream kept without `include_usage` has no usage to give a client that wants it."""
    return isinstance(completion.get("usage"), dict)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[bytes]) -> AsyncIterator[AsyncIterator[bytes]]:
    """`contextlib.aclosing` for any stream with an `aclose` (a generator, a metered one)."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
