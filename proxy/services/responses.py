"""`POST /v1/responses`: parse, translate, open the upstream stream, run the assembler.

Order of work for one request (what can fail where):
1. parse and validate (400 naming the field), expand history;
2. choose a replica and open its chat stream, waiting only for the response *headers*: unknown
   model (404), refused connection (502), upstream 4xx such as context-too-long (400) are still
   plain HTTP errors here, because vLLM validates before it answers;
3. from then on everything is an event: `response.created` and `response.in_progress` go out at
   once, chunks become events as they arrive, and a cut, stalled or erroring upstream becomes
   `response.failed` with the open items closed.
The non-streaming path runs the very same pump and returns the final object.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core import ids as idp
from proxy.core import types as t
from proxy.core.assembler import Assembler
from proxy.core.chatstream import ChatStreamReader
from proxy.core.errors import ProxyError, UpstreamError, UpstreamTimeout
from proxy.core.ids import IdFactory, new_id
from proxy.core.items import seal_reasoning
from proxy.core.request import ResponsesRequest, parse_request
from proxy.core.sse import frame
from proxy.core.translate import to_chat_request
from proxy.core.types import Event, ResponseObject
from proxy.metrics import Metrics
from proxy.services.fleet import Call, Fleet
from proxy.upstream import map_transport_errors

log = logging.getLogger("proxy.responses")

CHAT_PATH = "/v1/chat/completions"


@dataclass
class Outcome:
    """What the web layer renders: a JSON body, or an SSE byte stream."""

    status: int = 200
    body: ResponseObject | None = None
    stream: AsyncIterator[bytes] | None = None


class ResponsesService:
    def __init__(
        self,
        fleet: Fleet,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        ids: IdFactory = new_id,
        max_input_items: int = 2048,
    ) -> None:
        self._fleet = fleet
        self._metrics = metrics
        self._clock = clock
        self._ids = ids
        self._max_input_items = max_input_items

    async def create(self, tenant: str, body: dict[str, Any]) -> Outcome:
        request = parse_request(body, self._ids, max_input_items=self._max_input_items)
        chat = to_chat_request(request, [], stream=True)
        call = await self._fleet.open(request.model, CHAT_PATH, orjson.dumps(chat), stream=True)
        assembler = self._assembler(request)
        if request.stream:
            return Outcome(stream=self._sse(call, assembler))
        async for _ in self._pump(call, assembler):
            pass
        final = assembler.snapshot()
        if final["status"] == t.S_FAILED:
            raise UpstreamError(final["error"]["message"])
        return Outcome(body=final)

    def _assembler(self, request: ResponsesRequest) -> Assembler:
        base: ResponseObject = {
            "id": self._ids(idp.RESPONSE),
            "object": "response",
            "created_at": int(self._clock()),
            "model": request.model,
            **request.echo(),
        }
        seal = seal_reasoning if "reasoning.encrypted_content" in request.include else None
        return Assembler(base, ids=self._ids, clock=self._clock, seal_reasoning=seal)

    async def _pump(self, call: Call, assembler: Assembler) -> AsyncIterator[list[Event]]:
        """Events in batches: the start events at once, then one batch per upstream read.
        Always ends with the terminal event, and always closes the upstream."""
        yield assembler.start()
        reader = ChatStreamReader(assembler)
        try:
            with map_transport_errors(call.replica.url):
                async for raw in call.response.aiter_raw():
                    events = reader.feed(raw)
                    if events:
                        yield events
                    if assembler.done:
                        break
            yield reader.end()
        except UpstreamTimeout:
            yield assembler.fail("upstream stalled: no data within the idle timeout")
        except ProxyError as exc:
            yield assembler.fail(f"upstream connection lost: {exc.message}")
        finally:
            await call.aclose()
            self._count(assembler)

    async def _sse(self, call: Call, assembler: Assembler) -> AsyncIterator[bytes]:
        # One write per batch: several events from one upstream read leave together. `aclosing`
        # so that the pump's `finally` (closing the upstream) runs as soon as we are closed.
        async with contextlib.aclosing(self._pump(call, assembler)) as batches:
            async for events in batches:
                if events:
                    yield b"".join([frame(e["type"], orjson.dumps(e)) for e in events])

    def _count(self, assembler: Assembler) -> None:
        self._metrics.inc("proxy_responses_total", status=assembler.status)
        usage = assembler.usage
        if usage:
            self._metrics.inc("proxy_streamed_tokens_total", usage["output_tokens"],
                              route="responses")
