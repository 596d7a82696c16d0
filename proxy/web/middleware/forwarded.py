"""The client's address and scheme as the trusted proxy in front of us saw them
(`X-Forwarded-For`, `X-Forwarded-Proto`), applied by the front middleware (front.py).

uvicorn's `ProxyHeadersMiddleware` did this as a layer of its own: a coroutine frame and a
pass over the headers per request (~2 µs of a short answer's set-up). The front reads the two
headers in the pass over the headers it makes anyway, and calls this only when one of them is
there; the server's own layer is off (cli.py `uvicorn_config`). The rules are uvicorn's, so a
deployment sees the same `client` and `scheme`:
- only a connection from a trusted host has its headers read (`--forwarded-allow-ips`, as
  uvicorn's flag, or `FORWARDED_ALLOW_IPS`, its variable, comma-separated; by default the
  loopback addresses): an address, a network (`10.0.0.0/8`), `*` for every host, or any other
  text compared as it is (a Unix socket's name);
- `X-Forwarded-Proto` (the last one given) sets the scheme when it is http, https, ws or wss;
  a WebSocket's is spelled `ws`/`wss`;
- `X-Forwarded-For` (every one given, joined in order) sets the client to the nearest host
  that is not trusted (each proxy appends the one it saw), or to the first one listed when all
  are trusted (or every host is); `host:port` and `[v6]:port` are read with their port, any
  other value as a host with port 0; an empty host changes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import Scope

_SCHEMES = frozenset({"http", "https", "ws", "wss"})
# Hosts whose trust was worked out, kept; past this many (a flood of forged addresses), forgot.
_REMEMBERED = 4096
# Longer than any DNS name: never trusted through the cache (it would hold huge keys).
_LONGEST_HOST = 253

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The hosts whose `X-Forwarded-*` headers are believed."""

    def __init__(self, hosts: Iterable[str]) -> None:
        entries = [host.strip() for host in hosts]
        self.everyone = entries == ["*"]
        self._addresses: set[Address] = set()
        self._networks: list[Network] = []
        self._literals: set[str] = set()
        self._known: dict[str, bool] = {}
        for entry in entries if not self.everyone else ():
            try:
                if "/" in entry:
                    self._networks.append(ipaddress.ip_network(entry))
                else:
                    self._addresses.add(ipaddress.ip_address(entry))
            except ValueError:  # not an address: compared as text, as uvicorn does
                self._literals.add(entry)

    def __contains__(self, host: str | None) -> bool:
        if self.everyone:
            return True
        if not host:
            return False
        known = self._known.get(host)
        if known is None:
            known = self._trusted(host)
            if len(host) <= _LONGEST_HOST:
                if len(self._known) >= _REMEMBERED:
                    self._known.clear()
                self._known[host] = known
        return known

    def _trusted(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self._literals
        return address in self._addresses or any(address in net for net in self._networks)

    def client(self, forwarded_for: str) -> tuple[str, int]:
        """The client `X-Forwarded-For` names: the nearest host not trusted."""
        hosts = [part.strip() for part in forwarded_for.split(",")]
        if not self.everyone:
            for entry in reversed(hosts):
                host, port = _host_port(entry)
                if host not in self:
                    return host, port
        return _host_port(hosts[0])  # every one trusted: the first, the farthest

    def apply(self, scope: Scope, proto: bytes | None, forwarded_for: list[bytes]) -> None:
        """`scope`'s scheme and client from the headers' values, when its peer is trusted."""
        peer = scope.get("client")
        if (peer[0] if peer else None) not in self:
            return
        if proto is not None:
            scheme = proto.decode("latin-1").strip()
            if scheme in _SCHEMES:
                scope["scheme"] = (scheme.replace("http", "ws") if scope["type"] == "websocket"
                                   else scheme)
        if forwarded_for:
            host, port = self.client(b", ".join(forwarded_for).decode("latin-1"))
            if host:
                scope["client"] = (host, port)

    def apply_headers(self, scope: Scope) -> None:
        """`apply` with the headers read here (a WebSocket's handshake: the front reads an
        HTTP request's in its own pass)."""
        proto, forwarded_for = forwarded_headers(scope)
        if proto is not None or forwarded_for:
            self.apply(scope, proto, forwarded_for)


def forwarded_headers(scope: Scope) -> tuple[bytes | None, list[bytes]]:
    """(the last `X-Forwarded-Proto`, every `X-Forwarded-For`)."""
    proto: bytes | None = None
    forwarded_for: list[bytes] = []
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-proto":
            proto = value
        elif name == b"x-forwarded-for":
            forwarded_for.append(value)
    return proto, forwarded_for


def _host_port(value: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port`, `[v6]` or a bare host (port 0); a value that fits none of
    these is kept whole, as a host, so nothing is read into it that is not there."""
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return value, 0
        host, rest = value[1:end], value[end + 1:]
        if not rest:
            return host, 0
        if not rest.startswith(":"):
            return value, 0
        try:
            return host, int(rest[1:])
        except ValueError:
            return host, 0
    if value.count(":") == 1:
        host, port = value.split(":")
        try:
            return host, int(port)
        except ValueError:
            return value, 0
    return value, 0
