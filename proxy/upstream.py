"""The HTTP adapter to vLLM replicas: one shared `httpx.AsyncClient`, errors mapped where they
happen (the httpx `map_httpcore_exceptions` idea):

    httpx.ConnectError, ConnectTimeout        -> UpstreamUnreachable (502, safe to retry elsewhere)
    other transport errors (reset, protocol)  -> UpstreamError (502)
    httpx.TimeoutException (read/write/pool)  -> UpstreamTimeout (504)
    upstream 400/404/413/422/429 + vLLM body  -> the same status (422 -> 400), OpenAI shape
    upstream 401/403                          -> 502 (the proxy's own upstream key is wrong)
    upstream 5xx                              -> 502 with the upstream's message

The client's own headers never reach the upstream: every request is built here from scratch, with
`Authorization` carrying the configured upstream key (or nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from proxy.core.errors import (
    InvalidRequest,
    NotFound,
    ProxyError,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy.settings import Timeouts

# Upper bound on an error body we read from an upstream, so a broken replica cannot make us
# buffer without limit.
_MAX_ERROR_BODY = 64 * 1024


@contextlib.contextmanager
def map_transport_errors(url: str) -> Iterator[None]:
    try:
        yield
    except httpx.ConnectTimeout as exc:
        raise UpstreamUnreachable(f"upstream {url} did not accept the connection in time") from exc
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"upstream {url} timed out") from exc
    except httpx.ConnectError as exc:
        raise UpstreamUnreachable(f"upstream {url} is unreachable") from exc
    except httpx.TransportError as exc:
        raise UpstreamError(f"upstream {url} failed: {type(exc).__name__}") from exc


def error_from_upstream(status: int, body: bytes, url: str) -> ProxyError:
    """An upstream error response, as the error we give our client."""
    message, param = _upstream_message(body)
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
        return UpstreamError(f"upstream {url} refused the proxy's credentials ({status})")
    return UpstreamError(f"upstream {url} answered {status}: {message}")


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


class Upstream:
    """Requests to one replica at a time; `base` is the replica's root URL."""

    def __init__(self, client: httpx.AsyncClient, *, api_key: str | None, timeouts: Timeouts):
        self._client = client
        self._timeouts = timeouts
        self._headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
        }
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        # Streams wait for each chunk at most `idle`; a whole non-streamed answer `first_byte`.
        self._stream_timeout = httpx.Timeout(
            connect=timeouts.connect, read=timeouts.idle, write=timeouts.connect,
            pool=timeouts.connect,
        )
        self._call_timeout = httpx.Timeout(
            connect=timeouts.connect, read=timeouts.first_byte, write=timeouts.connect,
            pool=timeouts.connect,
        )

    @staticmethod
    def make_client(timeouts: Timeouts, max_connections: int = 2048) -> httpx.AsyncClient:
        # No cookie jar surprises, no env proxies, generous pool: one client for the process.
        return httpx.AsyncClient(
            timeout=httpx.Timeout(timeouts.idle, connect=timeouts.connect),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
            trust_env=False,
            follow_redirects=False,
        )

    async def post(self, base: str, path: str, body: bytes, *, stream: bool) -> httpx.Response:
        """Send `body`; return the open response (2xx only). The caller must `aclose()` it."""
        request = self._client.build_request(
            "POST", base + path, content=body, headers=self._headers,
            timeout=self._stream_timeout if stream else self._call_timeout,
        )
        return await self._send(base, request)

    async def get(self, base: str, path: str, *, timeout: float | None = None) -> httpx.Response:
        request = self._client.build_request(
            "GET", base + path, headers=self._headers,
            timeout=timeout if timeout is not None else self._call_timeout,
        )
        response = await self._send(base, request)
        with map_transport_errors(base):
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def _send(self, base: str, request: httpx.Request) -> httpx.Response:
        with map_transport_errors(base):
            response = await self._client.send(request, stream=True)
        if response.status_code < 400:
            return response
        try:
            with map_transport_errors(base):
                body = await _read_bounded(response)
        finally:
            await response.aclose()
        raise error_from_upstream(response.status_code, body, base)

    async def get_json(self, base: str, path: str, *, timeout: float | None = None) -> Any:
        response = await self.get(base, path, timeout=timeout)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(f"upstream {base} sent invalid JSON for {path}") from exc


async def _read_bounded(response: httpx.Response) -> bytes:
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


def end_to_end_headers(headers: httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
