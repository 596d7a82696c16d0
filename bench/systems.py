"""The systems compared: five ways of streaming the same answer, and the request each sends.

Every system asks the simulator for exactly `tokens` content tokens at `delay_ms` per token,
through the per-request directive `[[sim tokens=N delay_ms=D]]` in the last user message, so
one simulator serves every cell and every system gets an identical upstream stream (the chat
systems ask for usage like the proxy's own upstream request does).

    direct           chat stream straight from the simulator: the baseline
    passthrough      the same chat request through the proxy's /v1/chat/completions
    responses        POST /v1/responses, stream, store: false (no Redis on the path)
    responses-store  the same with store: true: the event log is written to Redis
    background       background: true, stream: true: a worker runs the job into the event log,
                     the client reads it through the log replay (live tail)

and, for the anchors' shape (whole answers, `stream: false`; bench/scenarios.py "anchors"):
`direct-json`, `responses-json`, `responses-store-json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from bench.checks import StreamKind

MODEL = "sim-model"


@dataclass(frozen=True)
class System:
    name: str
    via_proxy: bool
    path: str
    kind: StreamKind
    extra: tuple[tuple[str, Any], ...] = ()  # Responses body fields beyond stream/input

    @property
    def stream(self) -> bool:
        return not self.kind.endswith("-json")

    def body(self, tokens: int, delay_ms: float, ttft_ms: float | None = None) -> dict[str, Any]:
        text = prompt(tokens, delay_ms, ttft_ms)
        if self.kind.startswith("chat"):
            body: dict[str, Any] = {"model": MODEL,
                                    "messages": [{"role": "user", "content": text}],
                                    "stream": self.stream}
            if self.stream:
                body["stream_options"] = {"include_usage": True}
            return body
        return {"model": MODEL, "input": text, "stream": self.stream, **dict(self.extra)}

    def request(self, host: str, port: int, tokens: int, delay_ms: float,
                ttft_ms: float | None = None) -> bytes:
        """The complete HTTP/1.1 request, built once per row and written as is."""
        return http_post(host, port, self.path,
                         orjson.dumps(self.body(tokens, delay_ms, ttft_ms)))


def prompt(tokens: int, delay_ms: float, ttft_ms: float | None = None) -> str:
    """`ttft_ms`: the first token's wait (None: the simulator's own, about none)."""
    ttft = "" if ttft_ms is None else f" ttft_ms={ttft_ms:g}"
    return f"benchmark the proxy [[sim tokens={tokens} delay_ms={delay_ms:g}{ttft}]]"


def http_post(host: str, port: int, path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n"
            "\r\n")
    return head.encode() + body


SYSTEMS: dict[str, System] = {
    s.name: s for s in (
        System("direct", False, "/v1/chat/completions", "chat"),
        System("passthrough", True, "/v1/chat/completions", "chat"),
        System("responses", True, "/v1/responses", "responses", (("store", False),)),
        System("responses-store", True, "/v1/responses", "responses", (("store", True),)),
        System("background", True, "/v1/responses", "responses",
               (("store", True), ("background", True))),
        System("direct-json", False, "/v1/chat/completions", "chat-json"),
        System("responses-json", True, "/v1/responses", "responses-json",
               (("store", False),)),
        System("responses-store-json", True, "/v1/responses", "responses-json",
               (("store", True),)),
    )
}
STREAM_SYSTEM_NAMES = tuple(name for name, s in SYSTEMS.items() if s.stream)
