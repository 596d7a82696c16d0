"""OpenTelemetry traces: the SDK's provider and OTLP/HTTP exporter, and the few spans we make.

Off unless `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) is given: then nothing here is
built, no middleware is added, and the code that would make a span checks `None` and goes on.
On, one `Tracing` per process, made by the app (not the SDK's global provider: a test runs
several apps in one process, each with its own collector).

A collector must never slow or fail a request: spans go through a `BatchSpanProcessor`, whose
queue is bounded (a dead collector fills it, then spans are dropped) and whose export runs in
its own thread with a short timeout. Spans are per request and per upstream call, never per
token, and carry no prompt, no output text and no key (the key's digest at most).

Attributes follow OpenTelemetry's semantic conventions: HTTP server ones on the request span,
GenAI client ones (`gen_ai.*`) on the upstream call's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy import __version__

T = TypeVar("T")

TRACES_PATH = "/v1/traces"
# W3C trace context: the client's `traceparent` read, a job's carried across the queue.
PROPAGATOR = TraceContextTextMapPropagator()
DEFAULT_SERVICE = "responses-proxy"
# Seconds one export may take: the exporter's thread waits, never a request.
EXPORT_TIMEOUT = 5.0
# Spans held for export at most; past it they are dropped (a collector that is down or slow).
MAX_QUEUE = 4096
# An event-log flush this long (or a failed one) gets a span (`Tracing.slow_flush`); a flush
# usually takes well under a millisecond.
SLOW_FLUSH_NS = 100_000_000
# Seconds the shutdown waits for the last batch.
SHUTDOWN_SECONDS = 5.0


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL, as the standard
    `OTEL_EXPORTER_OTLP_ENDPOINT` is read (`/v1/traces` added); a URL already ending in it is
    kept."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def _positive(raw: str | None, default: int) -> int:
    """A positive integer from the environment; anything else is the default (a bad tuning
    variable must not stop the proxy)."""
    try:
        value = int(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default


def current_traceparent() -> str | None:
    """The `traceparent` of the current span (the request's), None outside one (tracing off):
    what a background job's spec carries to the worker that runs it."""
    span = trace.get_current_span()
    return traceparent(span) if span.get_span_context().is_valid else None


def traceparent(span: Span) -> str:
    """The W3C `traceparent` header value naming `span` (version 00, sampled flag kept)."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def tracestate(span: Span) -> str | None:
    """The W3C `tracestate` `span` carries (the client's, as the propagator read and checked
    it: a participant passes it on with its own `traceparent`); None when empty."""
    state = span.get_span_context().trace_state
    return state.to_header() if state else None


class Tracing:
    """The process's tracer provider and exporter. `open` returns None when tracing is off."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("responses-proxy", __version__)

    @classmethod
    def open(cls, endpoint: str | None, env: Mapping[str, str] | None = None) -> Tracing | None:
        env = os.environ if env is None else env
        # The standard switch that turns every OpenTelemetry SDK off.
        if not endpoint or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        # OTEL_RESOURCE_ATTRIBUTES is read by Resource.create; OTEL_SERVICE_NAME wins over it.
        resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME")
                                    or DEFAULT_SERVICE})
        provider = TracerProvider(resource=resource)
        # A collector that is down: one line per lost batch (ERROR), not one per retry too.
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.ERROR)
        # The exporter reads the other OTEL_EXPORTER_OTLP_* variables itself (headers,
        # compression, certificates; the timeout when one is set); the sampler and the
        # resource attributes are read by the provider, the OTEL_BSP_* ones by the batch.
        timeout = None if any(env.get(name) for name in (
            "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")) else EXPORT_TIMEOUT
        exporter = OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=timeout)
        provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=_positive(env.get("OTEL_BSP_MAX_QUEUE_SIZE"), MAX_QUEUE)))
        return cls(provider)

    def upstream_span(self, replica: str, url: str, model: str, operation: str) -> Span:
        """A client span for one call to a replica, child of the request's span (the current
        context). Its attributes are the call's; the tokens come when the answer ends."""
        # Host and port only: a replica's URL may carry credentials (`user:pass@`).
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        span = self.tracer.start_span(f"{operation} {model}", kind=SpanKind.CLIENT)
        span.set_attributes({
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": model,
            "server.address": host,
            "server.port": port,
            "proxy.replica": replica or f"{host}:{port}",
        })
        return span

    def tool_span(self, name: str, tool_type: str,
                  **more: str) -> contextlib.AbstractContextManager[Span]:
        """One tool call the proxy runs (an MCP tool, a hosted search): its name, never its
        arguments or output; what it calls (an embedding, an upstream) is its child."""
        return self._inner(f"execute_tool {name}", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.type": tool_type, **more})

    def store_span(self, operation: str) -> contextlib.AbstractContextManager[Span]:
        """One store write on the request path (its create, its end, a file's upload, a
        vector store's change): the operation's name only, never a key or a value."""
        return self._inner(f"store {operation}", {"db.system": "redis",
                                                  "db.operation.name": operation})

    def slow_flush(self, started_ns: int, streams: int, events: int,
                   error: BaseException | None = None) -> None:
        """One flush of the shared event-log writer (services/eventlog/writer.py) that failed
        or took `SLOW_FLUSH_NS` or more, as a span begun at `started_ns` (`time.time_ns()`)
        and ended now. A root span of its own: one flush carries the events of every live
        stream (a child of one request would be wrong for the others). Only the slow and the
        failed ones: the writer flushes every 20 ms while anything streams, and a span for
        each cost a lone stream a fifth more CPU (bench/tracing.py) for lines that all say
        "fine"; the ones kept are those an operator looks for."""
        span = self.tracer.start_span(
            "store append_events", context=otel_context.Context(), start_time=started_ns,
            attributes={"db.system": "redis", "db.operation.name": "append_events",
                        "proxy.eventlog.streams": streams, "proxy.eventlog.events": events})
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
        end_span(span, error)

    def job_span(self, model: str, parent: str | None,
                 response_id: str) -> contextlib.AbstractContextManager[Span]:
        """One background job run by a worker: a child of the request that created it (its
        `traceparent`, carried in the job's spec across the queue), so the job's upstream
        calls, tool calls and writes join that request's trace."""
        return self.consumer_span(f"job {model}", parent, {"gen_ai.request.model": model,
                                                           "gen_ai.response.id": response_id})

    def consumer_span(self, name: str, parent: str | None,
                      attributes: dict[str, Any]) -> contextlib.AbstractContextManager[Span]:
        """Work taken from the queue, child of the request that queued it (`parent`: that
        request's `traceparent`, carried in the entry; None: a trace of its own)."""
        context = PROPAGATOR.extract({"traceparent": parent}) if parent else None
        return self._inner(name, attributes, kind=SpanKind.CONSUMER, context=context)

    @contextlib.contextmanager
    def _inner(self, name: str, attributes: dict[str, Any], *,
               kind: SpanKind = SpanKind.INTERNAL,
               context: otel_context.Context | None = None) -> Iterator[Span]:
        """A span, current while it runs. An exception marks it failed by its type only (a
        message may quote text)."""
        with self.tracer.start_as_current_span(
                name, context=context, kind=kind, record_exception=False,
                set_status_on_exception=False, attributes=attributes) as span:
            try:
                yield span
            except BaseException as exc:
                span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                span.set_attribute("error.type", type(exc).__name__)
                raise

    def shutdown(self) -> None:
        """Export what is queued (bounded in time), then stop. Blocking: run it off the loop."""
        self.provider.force_flush(int(SHUTDOWN_SECONDS * 1000))
        self.provider.shutdown()


def store_write(tracing: Tracing | None,
                operation: str) -> contextlib.AbstractContextManager[Span | None]:
    """`Tracing.store_span`, or nothing when tracing is off (one `None` check, and one shared
    `nullcontext`: it holds nothing, and making one per write was a call more)."""
    return _NO_SPAN if tracing is None else tracing.store_span(operation)


_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def traced_writes(tracing: Tracing | None, target: T, operations: Mapping[str, str]) -> T:
    """`target` (a store adapter) with each named coroutine method (`operations`: method →
    the span's operation name) in a store span of its own; `target` itself when tracing is
    off. Done once where the adapters are handed out (runtime.py), so the services that write
    through them need no tracing of their own."""
    if tracing is None:
        return target
    for method, operation in operations.items():
        setattr(target, method, _traced(tracing, operation, getattr(target, method)))
    return target


def _traced(tracing: Tracing, operation: str,
            method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        with tracing.store_span(operation):
            return await method(*args, **kwargs)
    return traced


def note_answer(span: Span, usage: Mapping[str, Any] | None, response_id: str | None) -> None:
    """The GenAI attributes of an answered call: its tokens and the response's id. Counts
    only, never text. A call closed already (an interrupted turn) is left as it ended."""
    if not span.is_recording():
        return
    if usage:
        # A Responses usage, or a Chat Completions one (a chat passed through).
        for ours, chat, theirs in (
                ("input_tokens", "prompt_tokens", "gen_ai.usage.input_tokens"),
                ("output_tokens", "completion_tokens", "gen_ai.usage.output_tokens")):
            value = usage.get(ours, usage.get(chat))
            if isinstance(value, int):
                span.set_attribute(theirs, value)
    if response_id:
        span.set_attribute("gen_ai.response.id", response_id)


def note_first_chunk(span: Span) -> None:
    """The call's time to its first body chunk, in seconds since the span began (the request
    was sent). Called once per call."""
    started = getattr(span, "start_time", None)
    if started:
        span.set_attribute("gen_ai.server.time_to_first_token",
                           round((time.time_ns() - started) / 1e9, 6))


def end_span(span: Span, error: BaseException | None = None) -> None:
    if error is not None:
        span.set_status(trace.StatusCode.ERROR, type(error).__name__)
    span.end()
