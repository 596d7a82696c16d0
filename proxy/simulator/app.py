"""The simulator's ASGI app: routes, pacing, counters and disconnect detection (the I/O edge).

Everything an answer contains is decided up front by the pure modules (`request` -> `script` ->
`wire`); this module encodes the frames once with orjson and then, per token, does one `send`
and its pacing. Invariants:
  - pacing uses absolute deadlines (t0 + ttft + k * delay), so sleeps never accumulate drift;
    frames that share a deadline go out in one `send`; with no delay the loop still yields to
    the event loop every 64 frames;
  - a task listens for `http.disconnect` for as long as a request is being answered and
    cancels the handler the moment the client leaves, so an abort is counted within
    milliseconds even while the stream sleeps or stalls;
  - `fail=cut` (and a stall past `STALL_TIMEOUT_S`) raises `SimulatedCut` after the response
    started: uvicorn then closes the connection without the chunked terminator, which is what a
    crashed upstream looks like. A log filter keeps that deliberate exception out of the log;
  - every wait is bounded: request bodies by size, stalls by `STALL_TIMEOUT_S`, pacing by the
    directive bounds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from proxy.simulator import embeddings, wire
from proxy.simulator.answer import logprobs
from proxy.simulator.answer.script import Plan, plan
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import SimError, error_body, invalid
from proxy.simulator.prefixcache import Lookup, PrefixCache, prompt_sequence
from proxy.simulator.request import ChatRequest, parse_chat
from proxy.simulator.stats import Stats, StreamEnd
from proxy.simulator.tokenize import tokenize

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 64 * 1024 * 1024
# A `fail=stall:K` answer waits this long for its client to leave, then drops the connection.
STALL_TIMEOUT_S = 300.0
YIELD_EVERY = 64
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache")]
DONE = b"data: [DONE]\n\n"


class SimulatedCut(Exception):
    """Raised after the response started: uvicorn drops the connection mid-body."""


class ClientGone(Exception):
    """The client left while its request body was still arriving: nothing to answer."""


class _QuietCuts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], SimulatedCut))


class ClientWatch:
    """Cancels the current task when the client disconnects; `gone` tells the handler why."""

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self.closing = False  # set just before the last send: a close after it is no abort
        self._task = asyncio.current_task()
        self._watcher = asyncio.create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        message = await receive()
        while message["type"] == "http.request" and message.get("more_body"):
            message = await receive()  # a body still arriving: ignore it
        if message["type"] == "http.request":
            message = await receive()
        if message["type"] == "http.disconnect" and not self.closing and self._task:
            self.gone = True
            self._task.cancel()

    def close(self) -> None:
        self.closing = True
        self._watcher.cancel()


async def guarded(receive: Receive, work: Callable[[ClientWatch], Awaitable[None]]) -> bool:
    """Run `work`; return True if the client left first (the work was cancelled for it)."""
    watch = ClientWatch(receive)
    try:
        await work(watch)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not watch.gone or task is None:
            raise
        task.uncancel()
    finally:
        watch.close()
    return watch.gone


def frame_bytes(payload: dict[str, Any] | str) -> bytes:
    return DONE if payload == "[DONE]" else b"data: " + orjson.dumps(payload) + b"\n\n"


def grouped(frames: list[wire.Frame]) -> list[tuple[int, bytes]]:
    """Consecutive frames with the same pacing slot joined into one send."""
    out: list[tuple[int, bytes]] = []
    for slot, payload in frames:
        data = frame_bytes(payload)
        if out and out[-1][0] == slot:
            out[-1] = (slot, out[-1][1] + data)
        else:
            out.append((slot, data))
    return out


async def send_json(send: Send, status: int, payload: Any,
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = orjson.dumps(payload) if payload is not None else b""
    head = (JSON_HEADERS if payload is not None else []) + (headers or [])
    head = [*head, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise SimError(413, f"Request body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"JSON decode error: {exc}") from None


class Simulator:
    """The ASGI application. One instance per server; its state is its counters."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.stats = Stats()
        # Chat requests being answered, by model: vLLM's `num_requests_running` on /metrics.
        self.running: dict[str, int] = dict.fromkeys(config.models, 0)
        self.prefix_cache = PrefixCache(config.prefix_cache_blocks)
        # Prefills run one at a time (a replica's compute is shared): the loop time at which
        # the last one admitted ends. Only used when prefill costs time.
        self._prefill_free_at = 0.0
        # Engine request ids being answered, for the versions that refuse a duplicate.
        self.in_flight: set[str] = set()
        self.models = wire.models_list(config.models, created=int(time.time()),
                                       max_model_len=config.max_model_len)
        self.routes: dict[str, tuple[tuple[str, ...], Callable[..., Awaitable[None]]]] = {
            "/health": (("GET",), self.health),
            "/ping": (("GET", "POST"), self.health),
            "/version": (("GET",), self.version),
            "/metrics": (("GET",), self.metrics),
            "/v1/models": (("GET",), self.list_models),
            "/v1/chat/completions": (("POST",), self.chat),
            "/v1/embeddings": (("POST",), self.embed),
            "/tokenize": (("POST",), self.tokenize),
            "/sim/stats": (("GET",), self.read_stats),
            "/sim/reset": (("POST",), self.reset_stats),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if not path.startswith("/sim/"):
            self.stats.request(path)
        route = self.routes.get(path)
        if route is None:
            await send_json(send, 404, error_body(404, "Not Found", type_="Not Found"))
        elif scope["method"] not in route[0]:
            allow = ", ".join(route[0]).encode()
            await send_json(send, 405, error_body(405, "Method Not Allowed"),
                            [(b"allow", allow)])
        else:
            try:
                await route[1](scope, receive, send)
            except SimError as exc:
                await send_json(send, exc.status, exc.body())
            except ClientGone:
                return

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # uvicorn configures its loggers before startup, so the filter sticks.
                logging.getLogger("uvicorn.error").addFilter(_QuietCuts())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- small routes ----------------------------------------------------------------------
    async def health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, None)

    async def version(self, scope: Scope, receive: Receive, send: Send) -> None:
        # vLLM's own version string when one is simulated (the proxy reads it:
        # core/translate/effort.py)
        await send_json(send, 200, {"version": self.config.vllm_version or "0.0.0+simulator"})

    async def list_models(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self.models)

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = wire.metrics_text(self.running).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def read_stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self.stats.snapshot())

    async def reset_stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.stats.reset()
        self.prefix_cache.clear()  # a benchmark row starts cold
        await send_json(send, 200, {"reset": True})

    async def embed(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await read_body(receive))
        self.stats.embedding_requests += 1
        result = embeddings.response(body, self.config.models,
                                     request_id=f"embd-{uuid.uuid4().hex}",
                                     created=int(time.time()))
        self.stats.embedding_tokens += int(result["usage"]["prompt_tokens"])
        await send_json(send, 200, result)

    async def tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await read_body(receive))
        await send_json(send, 200, tokenize(body, self.config))

    # -- chat ------------------------------------------------------------------------------
    async def chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body = parse_json(raw)
        except SimError:
            self.stats.chat(None, headers)
            raise
        self.stats.chat(body, headers)
        # a schema check: before the others, as vLLM
        since_032 = self._since_032(body)
        try:
            top_logprobs = logprobs.requested(body, since_032=since_032,
                                              most=self.config.max_logprobs)
        except logprobs.AboveMax as exc:
            if not (since_032 and isinstance(body, dict) and body.get("stream") is True):
                raise
            # vLLM 0.32 checks the bound once the stream has begun: a 200, then the 400's
            # body as the only frame (captured by `make e2e-vllm`'s run).
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body",
                        "body": frame_bytes(exc.body()) + frame_bytes("[DONE]")})
            return
        req = parse_chat(body, self.config)
        self.stats.prompt(req.text)
        fail = req.directives.fail
        if fail is not None and fail.kind == "http":
            message = f"Simulated HTTP {fail.at} (fail=http:{fail.at})."
            raise SimError(fail.at, message)
        seen = self.admit(req.messages, body.get("tools"), req.cache_salt)
        answer = plan(req, self.config, request_id=f"chatcmpl-{uuid.uuid4().hex}",
                      created=int(time.time()), prefix_hits=seen.hit_tokens)
        prefill = self.prefill_delay(seen)
        engine_id = self.engine_id(req, headers.get("x-request-id"))
        duplicate = engine_id is not None and engine_id in self.in_flight
        self.running[req.model] = self.running.get(req.model, 0) + 1
        try:
            if duplicate and engine_id is not None:
                await self.refuse_duplicate(req, engine_id, send)
                return
            if engine_id is not None:
                self.in_flight.add(engine_id)
            if req.stream:
                await self.stream(req, answer, receive, send, prefill, top_logprobs)
            else:
                await self.complete(req, answer, receive, send, prefill, top_logprobs)
        finally:
            self.running[req.model] -= 1
            if engine_id is not None and not duplicate:
                self.in_flight.discard(engine_id)

    def _since_032(self, body: Any) -> bool:
        model = body.get("model") if isinstance(body, dict) else None
        return self.config.persona_for(model if isinstance(model, str)
                                       else self.config.models[0]).since_032

    @staticmethod
    def engine_id(req: ChatRequest, header: str | None) -> str | None:
        """vLLM makes the X-Request-Id header its engine request id; only the versions that
        refuse a second one in flight need it remembered (None: not tracked)."""
        return f"chatcmpl-{header}" if header and req.persona.unique_request_ids else None

    async def refuse_duplicate(self, req: ChatRequest, engine_id: str, send: Send) -> None:
        """vLLM before PR #27987: the engine refuses an id already running. The stream fails
        in-band before its first chunk (the generator raises on its first step); a
        non-stream request gets a 400."""
        message = f"Request id {engine_id} already running."
        self.stats.duplicate_ids += 1
        if not req.stream:
            raise SimError(400, message)
        self.stats.stream_started()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body",
                        "body": frame_bytes(error_body(400, message)) + DONE,
                        "more_body": False})
        finally:
            self.stats.stream_ended("completed")

    def admit(self, messages: list[dict[str, Any]], tools: Any,
              salt: str | None = None) -> Lookup:
        """The prompt through the prefix cache (partitioned by `salt`), counted."""
        seen = self.prefix_cache.admit(prompt_sequence(messages, tools), salt)
        self.stats.prefix(seen.hit_tokens, seen.miss_tokens)
        return seen

    def prefill(self, messages: list[dict[str, Any]], tools: Any,
                salt: str | None = None) -> float:
        return self.prefill_delay(self.admit(messages, tools, salt))

    def prefill_delay(self, seen: Lookup) -> float:
        """Seconds until this request's prefill is done: the prefills admitted before it, then
        its own prompt tokens that the prefix cache did not hold (0 without a prefill cost)."""
        cost = seen.miss_tokens * self.config.prefill_ms_per_token / 1000
        if cost <= 0:
            return 0.0
        now = asyncio.get_running_loop().time()
        self._prefill_free_at = max(now, self._prefill_free_at) + cost
        return self._prefill_free_at - now

    def timing(self, req: ChatRequest, prefill: float = 0.0) -> tuple[float, float]:
        """(ttft, delay) in seconds for this request; the prefill comes before the ttft."""
        d = req.directives
        ttft = d.ttft_ms if d.ttft_ms is not None else self.config.ttft_ms
        delay = d.delay_ms if d.delay_ms is not None else self.config.token_delay_ms
        return prefill + ttft / 1000, delay / 1000

    async def stream(self, req: ChatRequest, answer: Plan, receive: Receive, send: Send,
                     prefill: float = 0.0, top_logprobs: int | None = None) -> None:
        frames = wire.stream_frames(answer, include_usage=req.include_usage,
                                    continuous=req.continuous_usage)
        if top_logprobs is not None:
            logprobs.attach_stream(frames, answer, top_logprobs)
        blobs = grouped(frames)
        ttft, delay = self.timing(req, prefill)
        final = answer.ending in ("done", "error")
        outcome: StreamEnd = "cut"

        async def run(watch: ClientWatch) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await pace(send, blobs, ttft, delay, watch if final else None)
            if answer.ending == "stall":
                await asyncio.sleep(STALL_TIMEOUT_S)

        self.stats.stream_started()
        try:
            gone = await guarded(receive, run)
            outcome = "aborted" if gone else ("completed" if final else "cut")
        finally:
            self.stats.stream_ended(outcome)
        if outcome == "cut":
            raise SimulatedCut("fail=cut: dropping the connection mid-stream")

    async def complete(self, req: ChatRequest, answer: Plan, receive: Receive,
                       send: Send, prefill: float = 0.0, top_logprobs: int | None = None) -> None:
        ttft, delay = self.timing(req, prefill)
        wait = ttft + max(answer.completion_tokens - 1, 0) * delay
        if answer.ending == "stall":
            wait += STALL_TIMEOUT_S

        async def run(watch: ClientWatch) -> None:
            await asyncio.sleep(wait)

        if await guarded(receive, run):
            self.stats.completions_aborted += 1
            return
        if answer.ending == "error":
            await send_json(send, 500, wire.error_frame(answer))
        elif answer.ending in ("cut", "stall"):
            body = orjson.dumps(self._completion(answer, top_logprobs))
            head = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": body[: len(body) // 2],
                        "more_body": True})
            raise SimulatedCut("fail=cut: dropping the connection mid-body")
        else:
            await send_json(send, 200, self._completion(answer, top_logprobs))

    @staticmethod
    def _completion(answer: Plan, top_logprobs: int | None) -> dict[str, Any]:
        body = wire.completion(answer)
        if top_logprobs is not None:
            logprobs.attach_completion(body, answer, top_logprobs)
        return body


async def pace(send: Send, blobs: list[tuple[int, bytes]], ttft: float, delay: float,
               watch: ClientWatch | None) -> None:
    """Send each blob at t0 + ttft + slot * delay. With `watch`, the last send ends the body
    (and is flagged first, so the connection closing after it is not taken for an abort)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time() + ttft
    last = len(blobs) - 1
    for n, (slot, blob) in enumerate(blobs):
        wait = t0 + slot * delay - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        elif n % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        ending = watch is not None and n == last
        if ending and watch is not None:
            watch.closing = True
        await send({"type": "http.response.body", "body": blob, "more_body": not ending})


def create_app(config: SimConfig | None = None) -> Simulator:
    return Simulator(config or SimConfig())
