"""The HTTP adapter to vLLM replicas: one shared `ConnectionPool` of our own HTTP/1.1 client
(`http1.py`: asyncio + httptools; `pool.py`: keep-alive pool), errors mapped where they
happen (the httpx `map_httpcore_exceptions` idea):

    http1.ConnectError, ConnectTimeout        -> UpstreamUnreachable (502, safe to retry elsewhere)
    http1.PoolTimeout                         -> UpstreamUnavailable (503, our connections are
                                                 all busy; nothing was sent)
    http1.ReadTimeout                         -> UpstreamTimeout (504)
    http1.ReadError, ProtocolError            -> UpstreamError (502: reset, cut, not HTTP)
    upstream 400/404/413/422/429 + vLLM body  -> the same status (422 -> 400), OpenAI shape
    upstream 401/403                          -> 502 (the proxy's own upstream key is wrong)
    upstream 3xx, 5xx                         -> 502 with the upstream's message

Every message names no replica: it reaches clients (an HTTP error, a stream's
`response.failed`, a WebSocket error frame), and a replica's address is the operator's. The
address and the transport's own words (a `ConnectError` holds the peer's address) are logged
here instead, with the request id (logs.py), so an operator can still tell which replica failed.
Discovery probes are `quiet`: the fleet logs a replica's going down once, not every probe.

Why our own client and not httpx: on the per-token path httpx costs more than everything else
the proxy does (httpcore's pool does O(n^2) work per request over pooled connections; each read
goes through h11 in pure Python and an anyio cancel scope). See docs/BENCHMARKS.md.

The client's own headers never reach the upstream: every request is built here from scratch, with
`Authorization` carrying the configured upstream key (or nothing).
"""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from proxy import __version__
from proxy.core.context.requestctx import client_trace_lines, upstream_request_id
from proxy.core.errors import (
    AutoToolChoiceUnavailable,
    InvalidRequest,
    NotFound,
    ProxyError,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from proxy.core.translate.truncation import CONTEXT_LENGTH_EXCEEDED, is_context_overflow
from proxy.settings import Timeouts
from proxy.upstream.dial import Proxy
from proxy.upstream.http1 import (
    ConnectError,
    ConnectTimeout,
    ExchangeTimeouts,
    Headers,
    Origin,
    PoolTimeout,
    ReadTimeout,
    Response,
    TransportError,
)
from proxy.upstream.pool import ConnectionPool

__all__ = [
    "ConnectionPool",
    "Headers",
    "Response",
    "Upstream",
    "bad_answer",
    "end_to_end_headers",
    "error_from_upstream",
    "map_transport_errors",
    "transport_detail",
]

log = logging.getLogger("proxy.upstream")

# The `param` of an upstream 400 that says the prompt is too long (None: an older vLLM named
# none). vLLM 0.32 also says `max_model_len` when `max_tokens` alone is above it: that one is
# the output's bound, not the context (core/translate/fleet_errors.py).
_PROMPT_PARAMS = (None, "input_tokens", "messages", "prompt", "input")

# Upper bound on an error body we read from an upstream, so a broken replica cannot make us
# buffer without limit.
_MAX_ERROR_BODY = 64 * 1024


def map_transport_errors(url: str, *, quiet: bool | Callable[[], bool] = False
                         ) -> _MappedErrors:
    """`quiet` (or what it returns when the error comes): the error is not logged (an
    expected one, e.g. a read of a call we closed on purpose)."""
    return _MappedErrors(url, quiet)


class _MappedErrors:
    """`map_transport_errors`' context: a transport error leaves it as the `UpstreamError` it
    means. A class rather than a `contextmanager`, whose generator cost 1.0 µs per use against
    0.2: one per upstream call, one per read of a stream's body."""

    __slots__ = ("_quiet", "_url")

    def __init__(self, url: str, quiet: bool | Callable[[], bool]) -> None:
        self._url = url
        self._quiet = quiet

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(exc, TransportError):
            error = _transport_error(exc)
            quiet = self._quiet
            if not (quiet() if callable(quiet) else quiet):
                log.warning("upstream %s: %s (%s)", self._url, error.message,
                            transport_detail(exc))
            raise error from exc


def _transport_error(exc: TransportError) -> UpstreamError:
    if isinstance(exc, ConnectTimeout):
        return UpstreamUnreachable("upstream did not accept the connection in time")
    if isinstance(exc, ConnectError):
        return UpstreamUnreachable("upstream is unreachable")
    if isinstance(exc, PoolTimeout):
        return UpstreamUnavailable("no connection to an upstream is free")
    if isinstance(exc, ReadTimeout):
        return UpstreamTimeout("upstream timed out")
    return UpstreamError(f"upstream failed: {type(exc).__name__}")


def bad_answer(url: str, what: str) -> UpstreamError:
    """`upstream <what>` (an answer we cannot use) for the client; the address in the log."""
    log.warning("upstream %s %s", url, what)
    return UpstreamError(f"upstream {what}")


def transport_detail(exc: BaseException) -> str:
    """For the operator's log: `exc`, and the transport error under it with its own words."""
    cause = exc if isinstance(exc, TransportError) else exc.__cause__
    if not isinstance(cause, TransportError):
        return str(exc) or type(exc).__name__
    words = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return words if cause is exc else f"{exc} ({words})"


def error_from_upstream(status: int, body: bytes, url: str) -> ProxyError:
    """An upstream error response, as the error we give our client (its message cleared of
    the replica's address, should a replica or a gateway before it write one)."""
    message, param = _upstream_message(body)
    message = _without_address(message, url)
    if status == 400 and "--enable-auto-tool-choice" in message:
        return AutoToolChoiceUnavailable()
    if (status == 400 or status == 413) and is_context_overflow(message) \
            and param in _PROMPT_PARAMS:
        return InvalidRequest(message, param=param or "input", code=CONTEXT_LENGTH_EXCEEDED)
    if status == 400 or status == 422:
        return InvalidRequest(message, param=param)
    if status == 404:
        if param == "model" or "model" in message.lower():
            error: ProxyError = NotFound(message, param=param or "model", code="model_not_found")
            return error
        return NotFound(message, param=param)
    if status == 413:
        return InvalidRequest(message, param=param, status=413, code="request_too_large")
    if status == 429:
        return RateLimited(f"upstream is rate limiting: {message}")
    if status in (401, 403):
        return UpstreamError(f"upstream refused the proxy's credentials ({status})")
    return UpstreamError(f"upstream answered {status}: {message}")


def _without_address(message: str, url: str) -> str:
    parts = urlsplit(url)
    # A bare single-label host (`vllm`, `u`) is also an ordinary word: it goes only as part of
    # the URL or of `host:port`. Dotted names and IP addresses go wherever they are.
    for name in (url, parts.netloc.rpartition("@")[2], parts.hostname or ""):
        if ("." in name or ":" in name) and name in message:
            message = message.replace(name, "[replica]")
    return message


def _upstream_message(body: bytes) -> tuple[str, str | None]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return (body[:500].decode(errors="replace").strip() or "no message"), None
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        message = err.get("message") or err.get("detail") or str(err)
        param = err.get("param")
        return str(message), (str(param) if isinstance(param, str) and param else None)
    return str(err), None


@dataclass(frozen=True, slots=True)
class _Target:
    """A replica's root URL, parsed once: where to connect, and what every request carries."""

    origin: Origin
    prefix: bytes  # the root URL's path, before each request's path
    head: bytes  # header lines common to every request to it (host, user-agent, auth)


class Upstream:
    """Requests to one replica at a time; `base` is the replica's root URL."""

    def __init__(self, pool: ConnectionPool, *, api_key: str | None, timeouts: Timeouts):
        self._pool = pool
        common = [("user-agent", f"responses-proxy/{__version__}"),
                  ("accept-encoding", "identity")]
        if api_key:
            common.append(("authorization", f"Bearer {api_key}"))
        self._common = "".join(f"{name}: {value}\r\n" for name, value in common).encode("latin-1")
        self._targets: dict[str, _Target] = {}
        # Per-replica keys (a fleet file's `api_key`), sent instead of `api_key` to that one.
        self._own_auth: dict[str, bytes] = {}
        self._connect_timeout = timeouts.connect
        # Streams wait for their first chunk at most `first_token` (headers at most
        # `first_byte` too), then for each chunk at most `idle`; a whole non-streamed answer
        # `first_byte`.
        self._stream_timeouts = ExchangeTimeouts(
            timeouts.connect, min(timeouts.first_byte, timeouts.first_token),
            read=timeouts.idle, first=timeouts.first_token)
        self._call_timeouts = ExchangeTimeouts(timeouts.connect, timeouts.first_byte)

    def use_key(self, base: str, api_key: str) -> None:
        """Authenticate to the replica at `base` with its own key (before its first request)."""
        self._own_auth[base] = f"authorization: Bearer {api_key}\r\n".encode("latin-1")
        self._targets.pop(base, None)

    @staticmethod
    def make_pool(max_connections: int = 2048, max_idle_per_origin: int = 512, *,
                  max_per_origin: int | None = None, ca_bundle: str | None = None,
                  https_proxy: str | None = None, no_proxy: str = "") -> ConnectionPool:
        """One pool for the process, shared by every replica. TLS is always verified (against
        `ca_bundle` when given, else the system's store); https origins go through
        `https_proxy`'s CONNECT tunnel unless `no_proxy` names them."""
        tls = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
        return ConnectionPool(max_connections=max_connections, max_per_origin=max_per_origin,
                              max_idle_per_origin=max_idle_per_origin, ssl_context=tls,
                              proxy_for=proxy_resolver(https_proxy, no_proxy))

    def post(self, base: str, path: str, body: bytes, *, stream: bool,
             traceparent: str | None = None, tracestate: str | None = None
             ) -> Coroutine[Any, Any, Response]:
        """Send `body`; the awaited result is the open response (2xx only). The caller must
        `aclose()` it. `traceparent` (and `tracestate`): the W3C headers naming the call's span
        (tracing on), so that the replica's own spans (vLLM continues it) join the request's
        trace; tracing off, the client's own (core/context/requestctx.py), passed on unchanged.
        A plain call handing back the exchange's coroutine, not one of its own awaiting it: a
        frame less, resumed when the replica's head arrives."""
        target = self._target(base)
        head = target.head
        request_id = upstream_request_id()  # the client's request, traced into vLLM's logs
        if request_id:
            head += b"x-request-id: " + request_id.encode("latin-1") + b"\r\n"
        if traceparent is not None:
            head += b"traceparent: " + traceparent.encode("latin-1") + b"\r\n"
            if tracestate:
                head += b"tracestate: " + tracestate.encode("latin-1") + b"\r\n"
        else:  # tracing off: the client's own (core/context/tracecontext.py), passed on
            head += client_trace_lines()
        request = b"POST %s HTTP/1.1\r\n%scontent-type: application/json\r\n" \
                  b"content-length: %d\r\n\r\n%s" % (target.prefix + path.encode(), head,
                                                     len(body), body)
        timeouts = self._stream_timeouts if stream else self._call_timeouts
        return self._send(base, target, request, timeouts)

    async def get(self, base: str, path: str, *, timeout: float | None = None) -> Response:
        """GET `path`; the response comes back read (`content`) and closed."""
        target = self._target(base)
        request = b"GET %s HTTP/1.1\r\n%s\r\n" % (target.prefix + path.encode(), target.head)
        timeouts = self._call_timeouts if timeout is None else ExchangeTimeouts(
            min(self._connect_timeout, timeout), timeout)
        response = await self._send(base, target, request, timeouts, idempotent=True)
        with map_transport_errors(base, quiet=True):
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def get_json(self, base: str, path: str, *, timeout: float | None = None) -> Any:
        response = await self.get(base, path, timeout=timeout)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(f"upstream sent invalid JSON for {path}") from exc

    async def _send(self, base: str, target: _Target, request: bytes,
                    timeouts: ExchangeTimeouts, *, idempotent: bool = False) -> Response:
        """`idempotent`: a GET (a discovery probe), retried on a stale pooled connection, and
        quiet in the log (the fleet logs a replica's change of state)."""
        with map_transport_errors(base, quiet=idempotent):
            response = await self._pool.request(target.origin, request, timeouts,
                                                idempotent=idempotent)
        if 200 <= response.status_code < 300:
            return response
        try:
            with map_transport_errors(base, quiet=idempotent):
                body = await _read_bounded(response)
        finally:
            await response.aclose()
        error = error_from_upstream(response.status_code, body, base)
        if isinstance(error, UpstreamError) and not idempotent:
            log.warning("upstream %s answered %d: %s", base, response.status_code,
                        error.message)
        raise error

    def _target(self, base: str) -> _Target:
        target = self._targets.get(base)
        if target is None:
            parts = urlsplit(base)
            scheme = parts.scheme
            port = parts.port or (443 if scheme == "https" else 80)
            host = parts.netloc.rpartition("@")[2]  # the Host header never carries userinfo
            head = b"host: " + host.encode("ascii") + b"\r\n" + self._common
            own = self._own_auth.get(base)
            if own is not None:  # the replica's key replaces the fleet-wide one
                head = b"".join(line + b"\r\n" for line in head.split(b"\r\n")
                                if line and not line.startswith(b"authorization:")) + own
            target = _Target((scheme, parts.hostname or "", port),
                             parts.path.rstrip("/").encode(), head)
            self._targets[base] = target
        return target


def proxy_resolver(https_proxy: str | None, no_proxy: str
                   ) -> Callable[[Origin], Proxy | None] | None:
    """Which origins go through `https_proxy` (`http://[user:pass@]host:port`): https ones
    that `no_proxy` (comma-separated hosts, `.suffix`es, `host:port`s or `*`) does not name.
    Plain-http upstreams are always reached directly (`HTTP_PROXY` is not used: a fleet on
    plain HTTP sits on a private network, and proxies commonly allow CONNECT to 443 only)."""
    if not https_proxy:
        return None
    parts = urlsplit(https_proxy)
    authorization = None
    if parts.username is not None:
        userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(userinfo.encode()).decode("ascii")
    proxy = Proxy(parts.hostname or "", parts.port or 80, authorization)

    def resolve(origin: Origin) -> Proxy | None:
        scheme, host, port = origin
        if scheme != "https" or _bypassed(host, port, no_proxy):
            return None
        return proxy

    return resolve


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """`NO_PROXY` as curl reads it: `*`, or an entry equal to the host (or `host:port`), or a
    domain suffix (`.example.com` and `example.com` both match `a.example.com`)."""
    host = host.lower().strip("[]")
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        name, entry_port = entry, ""
        if entry.count(":") == 1:  # host:port (an IPv6 address has several colons)
            name, _, entry_port = entry.partition(":")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


async def _read_bounded(response: Response) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        parts.append(chunk)
        size += len(chunk)
        if size >= _MAX_ERROR_BODY:
            break
    return b"".join(parts)[:_MAX_ERROR_BODY]


# Connection-level headers (RFC 9110 §7.6.1) and ones the ASGI server sets itself.
_NOT_FORWARDED = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "content-length", "content-encoding", "date", "server",
})


def end_to_end_headers(headers: Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
