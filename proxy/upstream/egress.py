"""Connections to URLs a client named (MCP servers, images): the name resolved once, every
address vetted (core/policy/urlpolicy.py `address_allowed`), the connection made to the vetted
address.

Why pin: checking a name's addresses and then letting an HTTP client connect by name resolves
it twice, and a name that answers a public address first and 127.0.0.1 next (DNS rebinding,
TTL 0) passes the check and reaches loopback. Here the HTTP client gets a transport that
connects to the one address we vetted, while the Host header, TLS SNI and certificate
verification stay the original name's. It refuses any other origin outright (the clients
follow no redirect off the origin anyway; this makes it a property of the connection).

    pin(target, private_ok) ─▶ Pinned(target, address)   or EgressRefused(status, message)
    pinned_client(pinned, ...) ─▶ an httpx2.AsyncClient that only ever reaches `address`

`resolve` is injectable (tests answer public-then-loopback). Only MCP and the media fetcher use
this module, and they import it on first use: httpx2 (the `mcp` package's HTTP client) costs
start-up time most deployments never need.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import httpx2

from proxy.core.policy.urlpolicy import Target, address_allowed

Resolve = Callable[[str, int], Awaitable[list[str]]]


class EgressRefused(Exception):
    """The target cannot be reached: `status` 502 (no address) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Pinned:
    target: Target
    address: str  # the vetted IP the connection goes to


async def system_resolve(host: str, port: int) -> list[str]:
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(entry[4][0]) for entry in found]


async def pin(target: Target, private_ok: bool, *, timeout: float, allow: str,
              resolve: Resolve = system_resolve) -> Pinned:
    """Resolve `target`'s host once and vet every address it has: one address the operator
    did not allow and the name is refused (a name mixing public and private answers is the
    shape of an attack, not of a service). `allow` names the allow-list flag in a refusal,
    whose message reads after "the URL's"."""
    if target.ip is not None:
        addresses = [target.host]
    else:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve(target.host, target.port)
        except (OSError, TimeoutError) as exc:
            raise EgressRefused(502, "host cannot be resolved "
                                     f"({exc.__class__.__name__})") from None
    if not addresses:
        raise EgressRefused(502, "host has no address")
    for address in addresses:
        if not address_allowed(address, private_ok):
            raise EgressRefused(403, f"host resolves to a private address, which {allow} "
                                     "did not name explicitly")
    return Pinned(target, addresses[0].split("%", 1)[0])


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to the pinned address: the URL's host becomes the IP, the request
    keeps its `Host` header (set from the name when it was built) and TLS uses the name for
    SNI and for checking the certificate (httpcore's `sni_hostname`)."""

    def __init__(self, pinned: Pinned, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._pinned = pinned
        # trust_env off: an HTTP(S)_PROXY would resolve the name again, on its side.
        self._inner = inner or httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = self._pinned.target
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        if (url.scheme, url.host, port) != (target.scheme, target.host, target.port):
            raise httpx2.ConnectError("refused: not the vetted origin", request=request)
        forwarded = httpx2.Request(
            request.method, url.copy_with(host=self._pinned.address), headers=request.headers,
            stream=request.stream,
            extensions={**request.extensions, "sni_hostname": target.host})
        return await self._inner.handle_async_request(forwarded)

    async def aclose(self) -> None:
        await self._inner.aclose()


def pinned_client(pinned: Pinned, *, timeout: httpx2.Timeout,
                  headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """An HTTP client that reaches `pinned.address` only. Redirects are not followed by it (the
    callers decide, each hop vetted anew)."""
    return httpx2.AsyncClient(transport=PinnedTransport(pinned), timeout=timeout,
                              headers=headers, follow_redirects=False, trust_env=False)
