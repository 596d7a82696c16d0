"""The client's address and scheme from a trusted proxy's `X-Forwarded-*`
(proxy/web/middleware/forwarded.py), read by the front middleware where uvicorn's own
`ProxyHeadersMiddleware` read them before: the same scope for every case, with uvicorn's class
as the reference, and one layer less per request."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
import pytest
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from proxy.app import create_app
from proxy.cli import uvicorn_config
from proxy.settings import Settings, build_settings
from proxy.web.middleware.forwarded import TrustedProxies
from proxy.web.middleware.front import Front

TRUSTS: list[list[str]] = [
    ["127.0.0.1", "::1"], ["*"], ["10.0.0.0/8", "192.168.1.1"], ["unix:sock", "2001:db8::/32"],
    [],
]
PEERS = [("127.0.0.1", 5000), ("10.1.2.3", 1), ("192.168.1.1", 2), ("::1", 3),
         ("2001:db8::7", 4), ("203.0.113.9", 5), None, ("unix:sock", 0)]
HEADERS: list[list[tuple[bytes, bytes]]] = [
    [],
    [(b"x-forwarded-for", b"203.0.113.5")],
    [(b"x-forwarded-for", b"203.0.113.5:8443, 10.0.0.2")],
    [(b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-for", b"10.9.9.9, 127.0.0.1")],
    [(b"x-forwarded-for", b"[2001:db8::1]:443"), (b"x-forwarded-proto", b"https")],
    [(b"x-forwarded-for", b"[2001:db8::1]"), (b"x-forwarded-proto", b" wss ")],
    [(b"x-forwarded-for", b"[2001:db8::1"), (b"x-forwarded-proto", b"gopher")],
    [(b"x-forwarded-for", b"[::1]x"), (b"x-forwarded-proto", b"http"),
     (b"x-forwarded-proto", b"https")],
    [(b"x-forwarded-for", b"host:notaport")], [(b"x-forwarded-for", b"[::1]:bad")],
    [(b"x-forwarded-for", b"")], [(b"x-forwarded-for", b" , 10.0.0.1")],
    [(b"x-forwarded-for", b"10.0.0.1, 192.168.1.1")],
    [(b"x-forwarded-for", b"a:b:c")], [(b"x-forwarded-proto", b"ws")],
]


def _scope(kind: str, peer: tuple[str, int] | None,
           headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    scope: dict[str, Any] = {"type": kind, "scheme": "http" if kind == "http" else "ws",
                             "headers": list(headers), "path": "/"}
    if peer is not None:
        scope["client"] = peer
    return scope


async def _uvicorn(trust: list[str], scope: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def app(inner: dict[str, Any], receive: Any, send: Any) -> None:
        seen.update(inner)

    await ProxyHeadersMiddleware(app, trusted_hosts=trust)(scope, None, None)  # type: ignore[arg-type]
    return seen


def _ours(trust: list[str], scope: dict[str, Any]) -> dict[str, Any]:
    TrustedProxies(trust).apply_headers(scope)
    return scope


@pytest.mark.parametrize("trust", TRUSTS)
def test_the_scope_is_the_one_uvicorns_layer_made(trust: list[str]) -> None:
    for kind, peer, headers in itertools.product(("http", "websocket"), PEERS, HEADERS):
        expected = asyncio.run(_uvicorn(trust, _scope(kind, peer, headers)))
        ours = _ours(trust, _scope(kind, peer, headers))
        assert (ours.get("client"), ours["scheme"]) == (expected.get("client"),
                                                         expected["scheme"]), (kind, peer,
                                                                               headers)


def test_a_trusted_proxy_names_the_client_and_an_untrusted_one_does_not() -> None:
    proxies = TrustedProxies(["10.0.0.0/8"])
    scope = _scope("http", ("10.0.0.3", 1), [(b"x-forwarded-for", b"203.0.113.5, 10.0.0.9"),
                                             (b"x-forwarded-proto", b"https")])
    proxies.apply_headers(scope)
    assert scope["client"] == ("203.0.113.5", 0) and scope["scheme"] == "https"
    scope = _scope("http", ("203.0.113.7", 1), [(b"x-forwarded-for", b"1.2.3.4")])
    proxies.apply_headers(scope)
    assert scope["client"] == ("203.0.113.7", 1)


def test_forgotten_hosts_are_bounded() -> None:
    proxies = TrustedProxies(["127.0.0.1"])
    for i in range(10_000):
        assert f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" not in proxies
    assert "127.0.0.1" in proxies and len(proxies._known) <= 4096


def test_the_trusted_hosts_are_uvicorns_setting() -> None:
    """`--forwarded-allow-ips` / `FORWARDED_ALLOW_IPS` (comma-separated, as uvicorn reads
    them), by default the loopback addresses as uvicorn's."""
    assert Settings.of().server.forwarded_allow_ips == ("127.0.0.1", "::1")
    env = {"FORWARDED_ALLOW_IPS": "10.0.0.0/8, 192.168.1.1", "PROXY_UPSTREAMS": "http://u:1"}
    assert build_settings({}, env).server.forwarded_allow_ips == ("10.0.0.0/8", "192.168.1.1")
    flags = {"forwarded_allow_ips": ["*"], "upstreams": None}
    assert build_settings(flags, env).server.forwarded_allow_ips == ("*",)


def test_only_the_front_reads_the_headers_under_serve() -> None:
    """uvicorn's layer is off under `serve`: one place reads them, a layer less per request."""
    config = uvicorn_config(lambda *_: None, Settings.of(), host="127.0.0.1")
    assert config.proxy_headers is False


def _front(app: Any) -> Front:
    stack = app.build_middleware_stack()
    while not isinstance(stack, Front):
        stack = stack.app
    return stack


async def test_the_app_reads_them_for_each_request() -> None:
    """In the app as served: the endpoint sees the client the trusted proxy named."""
    app = create_app(Settings.of(upstreams=("http://127.0.0.1:9",)))
    seen: list[Any] = []

    async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["client"], scope["scheme"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": orjson.dumps({})})

    front = _front(app)
    front.app = endpoint
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = _scope("http", ("127.0.0.1", 40000), [(b"x-forwarded-for", b"198.51.100.4"),
                                                  (b"x-forwarded-proto", b"https")])
    scope.update(method="GET", path="/healthz", raw_path=b"/healthz", query_string=b"")
    await front(scope, receive, send)
    assert seen == [(("198.51.100.4", 0), "https")]


def test_serve_names_no_server_software() -> None:
    """No `server: uvicorn` on the answers (cli.py says why); uvicorn's `date` stays."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    config = uvicorn_config(app, Settings.of(), host="127.0.0.1")
    config.load()
    assert b"server" not in dict(config.encoded_headers)
    assert config.date_header is True
