"""The candidate against our own upstream client: `aiohttp`'s client behind the same facade as
`proxy.upstream.client.Upstream` (post / get / get_json, the same error mapping), used only by
`bench/clients.py` to measure it against our own client in one run. aiohttp is not a
dependency of the proxy: `pip install aiohttp` to run the comparison.

Run as `python -m bench.aiohttp_upstream serve ...`: the proxy's own `serve`, with its
`Runtime` building this adapter instead of ours (the swap is local to this process).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import orjson

from proxy import __version__
from proxy.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import Timeouts
from proxy.upstream.client import error_from_upstream
from proxy.upstream.http1 import Headers

_MAX_ERROR_BODY = 64 * 1024


class Session:
    """The process's aiohttp session, made lazily inside the running loop."""

    def __init__(self, limit: int, limit_per_host: int) -> None:
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._limit,
                                             limit_per_host=self._limit_per_host,
                                             keepalive_timeout=4.0)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class AiohttpResponse:
    __slots__ = ("_content", "_resp", "headers", "status_code")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status_code = resp.status
        self.headers = Headers([(k.lower(), v) for k, v in resp.headers.items()])
        self._content: bytes | None = None

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise UpstreamTimeout("upstream timed out") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"upstream failed: {exc}") from exc
        self._resp.release()

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([c async for c in self.aiter_raw()])
        return self._content

    @property
    def content(self) -> bytes:
        assert self._content is not None
        return self._content

    @property
    def buffered(self) -> bool:
        # aiohttp has no public count of unread bytes: the start events always go out alone
        # (our client sends them with the first read's when it is already here).
        return False

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()  # aborts the connection: vLLM stops generating


class AiohttpUpstream:
    def __init__(self, pool: Session, *, api_key: str | None, timeouts: Timeouts) -> None:
        self._pool = pool
        self._headers = {"user-agent": f"responses-proxy/{__version__}",
                         "accept-encoding": "identity", "content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._stream = aiohttp.ClientTimeout(total=None, connect=timeouts.connect,
                                             sock_read=timeouts.idle)
        self._call = aiohttp.ClientTimeout(total=timeouts.first_byte, connect=timeouts.connect)
        self._connect = timeouts.connect
        self._own_auth: dict[str, str] = {}

    def use_key(self, base: str, api_key: str) -> None:
        """A fleet file's per-replica key (proxy/upstream/client.py `Upstream.use_key`)."""
        self._own_auth[base] = f"Bearer {api_key}"

    @staticmethod
    def make_pool(max_connections: int = 2048, max_idle_per_origin: int = 512, *,
                  max_per_origin: int | None = None, ca_bundle: str | None = None,
                  https_proxy: str | None = None, no_proxy: str = "") -> Session:
        # The bench's upstreams are plain http on loopback: TLS and proxies are not compared.
        return Session(max_connections, max_per_origin or 0)

    async def post(self, base: str, path: str, body: bytes, *, stream: bool,
                   traceparent: str | None = None, tracestate: str | None = None
                   ) -> AiohttpResponse:
        extra = {"traceparent": traceparent} if traceparent is not None else {}
        if traceparent is not None and tracestate:
            extra["tracestate"] = tracestate
        return await self._send("POST", base, path, body, self._stream if stream else self._call,
                                extra)

    async def get(self, base: str, path: str, *, timeout: float | None = None
                  ) -> AiohttpResponse:
        limit = self._call if timeout is None else aiohttp.ClientTimeout(
            total=timeout, connect=min(self._connect, timeout))
        response = await self._send("GET", base, path, None, limit)
        await response.aread()
        await response.aclose()
        return response

    async def get_json(self, base: str, path: str, *, timeout: float | None = None) -> Any:
        response = await self.get(base, path, timeout=timeout)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(f"upstream {base} sent invalid JSON for {path}") from exc

    async def _send(self, method: str, base: str, path: str, body: bytes | None,
                    timeout: aiohttp.ClientTimeout, extra: dict[str, str] | None = None
                    ) -> AiohttpResponse:
        headers = self._headers
        if extra or base in self._own_auth:
            headers = {**headers, **(extra or {})}
            if base in self._own_auth:
                headers["authorization"] = self._own_auth[base]
        try:
            resp = await self._pool.get().request(method, base + path, data=body,
                                                  headers=headers, timeout=timeout)
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamUnreachable(f"upstream {base} is unreachable") from exc
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream {base} timed out") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"upstream {base} failed: {exc}") from exc
        response = AiohttpResponse(resp)
        if 200 <= resp.status < 300:
            return response
        try:
            data = await resp.content.read(_MAX_ERROR_BODY)
        finally:
            resp.close()
        raise error_from_upstream(resp.status, data, base)


def main(argv: Sequence[str]) -> int:
    from proxy import cli, runtime

    # `Runtime.build` makes its pool and client through the name `Upstream` in proxy/runtime.py;
    # rebinding it there swaps the client for this process only.
    vars(runtime)["Upstream"] = AiohttpUpstream
    cli.main(list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
