"""What one request carries through every layer without being passed by hand: its id (echoed
to the client, sent upstream, on every log line) and the replica that served it (for the access
log).

`CURRENT` is a `ContextVar`, the one deliberate piece of module state: asyncio gives each task a
copy of its parent's context, so the value set by the access-log middleware at the start of a
request is seen by the handler, the services, the upstream client and the stream task the
response starts, and by nothing else. It is read once per request (upstream call, log record),
never per token. The `RequestContext` it holds is mutable so that a lower layer (the fleet) can
note the replica for the middleware, which reads it when the request ends.

Pure: validating a client's id is here; making a new one (randomness) is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from proxy.core.context.tracecontext import trace_headers

HEADER = "x-request-id"
# Long enough for a UUID, a W3C trace id or a load balancer's own id; short enough to keep log
# lines and upstream headers small.
MAX_LENGTH = 128
# Safe in an HTTP header, a log line and a JSON string without escaping: no spaces, quotes,
# control characters or separators a log parser would split on.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:")


@dataclass(slots=True)
class RequestContext:
    request_id: str
    replica: str | None = None  # the upstream root URL that answered, when one did
    # When (perf_counter) the generation request was first written to a replica: the end of
    # the proxy's own work on the request, for `proxy_overhead_seconds`
    # (web/middleware/front.py).
    upstream_sent: float | None = None
    upstream_calls: int = 0  # how many upstream calls carried an id (upstream_request_id)
    # Random, made by whoever makes the context: sets this request's upstream ids apart from
    # another request in flight under the same client id (empty: the id is ours, so unique).
    upstream_tag: str = ""
    # The client's W3C trace context (core/context/tracecontext.py, checked), passed on unchanged to
    # every upstream call that carries no span of ours (tracing off): the replica joins the
    # client's trace. None: the client sent none (or a malformed one, dropped).
    traceparent: str | None = None
    tracestate: str | None = None
    # Gives back the request's set-up slot (services/fleet/setups.py) once its upstream call is
    # open, or before it waits in the admission queue; None: no slot held.
    end_setup: Callable[[], None] | None = None


CURRENT: ContextVar[RequestContext | None] = ContextVar("proxy_request", default=None)


def accept_request_id(value: str | None) -> str | None:
    """The client's id when it is usable as is; None (make a new one) when it is missing, too
    long or carries anything outside `_SAFE` (it would go into headers and log lines)."""
    if not value or len(value) > MAX_LENGTH or not _SAFE.issuperset(value):
        return None
    return value


def current_request_id() -> str | None:
    context = CURRENT.get()
    return context.request_id if context is not None else None


def client_trace_lines() -> bytes:
    """The header lines of the current request's client trace context (b"": none), for an
    upstream call that carries no span of ours."""
    context = CURRENT.get()
    if context is None or context.traceparent is None:
        return b""
    return trace_headers(context.traceparent, context.tracestate)


def upstream_request_id() -> str | None:
    """The id for the current request's next upstream call: the client's id with a per-call
    suffix (`<id>-1`, `<id>-2`, ...), and before it the request's `upstream_tag` when it has
    one (`<id>-<tag>-1`). vLLM makes the header its engine request id, and before late 2025
    refused a second request in flight under one id ('already running'); one client request can
    make several calls (retries, tool loop turns, summaries, tokenize), and a client can send
    one id on concurrent requests (the tag). The shared prefix keeps them traceable to the
    client's id, which the client and our logs keep."""
    context = CURRENT.get()
    if context is None:
        return None
    context.upstream_calls += 1
    if context.upstream_tag:
        return f"{context.request_id}-{context.upstream_tag}-{context.upstream_calls}"
    return f"{context.request_id}-{context.upstream_calls}"


def client_traceparent() -> str | None:
    """The current request's client `traceparent` (checked), None when it sent none."""
    context = CURRENT.get()
    return context.traceparent if context is not None else None


def note_upstream_sent(at: float) -> None:
    """Record when the current request's generation call was written (the first one only: a
    retry on another replica is the fleet's delay, not the proxy's work). No-op outside a
    request. `at` comes from the caller: this module reads no clock."""
    context = CURRENT.get()
    if context is not None and context.upstream_sent is None:
        context.upstream_sent = at


def note_replica(url: str) -> None:
    """Record which replica answered the current request (no-op outside a request)."""
    context = CURRENT.get()
    if context is not None:
        context.replica = url


def end_setup() -> None:
    """Give back the current request's set-up slot, if it holds one (no-op otherwise)."""
    context = CURRENT.get()
    if context is not None and context.end_setup is not None:
        release, context.end_setup = context.end_setup, None
        release()
