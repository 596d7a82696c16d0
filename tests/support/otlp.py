"""A real OTLP/HTTP trace receiver for the tests: `POST /v1/traces` with an
`ExportTraceServiceRequest` protobuf body (what the SDK's OTLP/HTTP exporter sends), decoded with
`opentelemetry-proto` and kept as plain `ReceivedSpan`s. Binds 127.0.0.1 on a free port (or the
one given), runs in a thread of the test process; `python -m tests.support.otlp PORT` runs one
alone (bench/tracing.py: a live collector that is not the load generator's process)."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]
    service: str


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    def __init__(self, port: int = 0, *, keep: bool = True) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.received = 0  # spans, kept or not
        self._keep = keep  # False: counted only (a long bench run would fill memory)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:  # `GET /stats`: how many spans came (the bench's check)
                with receiver._lock:
                    answer = b'{"posts": %d, "spans": %d}' % (receiver.posts, receiver.received)
                self.send_response(200 if self.path == "/stats" else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), span.kind,
                        {a.key: _value(a.value) for a in span.attributes},
                        str(resource.get("service.name", ""))))
        with self._lock:
            self.posts += 1
            self.received += len(spans)
            if self._keep:
                self.spans += spans

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans received once `predicate(spans)` holds (bounded in time)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    import sys

    receiver = OtlpReceiver(int(sys.argv[1]), keep=False).start()
    try:
        while True:  # until the bench stops us (SIGTERM)
            time.sleep(3600)
    finally:
        receiver.stop()
