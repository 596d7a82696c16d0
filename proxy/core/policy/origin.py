"""What a browser may make an open proxy do (no API keys: the default). Pure.

A page from any site can make its visitor's browser open a WebSocket to the proxy, or POST a
`text/plain` (or form) body to it without a CORS preflight; the proxy, if reachable from the
browser (localhost, an office network), would then run responses for that page. Two checks
close that, both only while auth is off (with keys, the browser has no key to send: a bearer
header needs a preflight the proxy never grants, and a WebSocket cannot carry one at all):
  - a WebSocket handshake whose `Origin` is neither the proxy's own (its scheme's host and port
    equal the `Host` header's) nor one the operator allowed (`--allow-origin`) is refused;
    a handshake without `Origin` is not from a browser and goes on;
  - a request body must be declared JSON (`application/json` or `application/*+json`): a
    browser sends those cross-origin only after a preflight, which the proxy does not answer.
"""

from __future__ import annotations

from urllib.parse import urlsplit

Origin = tuple[str, str, int]  # scheme, host (lowercase), port

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def parse_origin(text: str) -> Origin | None:
    """`scheme://host[:port]` as browsers serialize it (no path, no user), else None (`null`,
    junk, a URL with a path)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def same_origin(origin: Origin, host_header: str) -> bool:
    """`origin` names this server as the client reached it (`Host`, the origin's default port
    when it has none)."""
    parsed = parse_origin(f"{origin[0]}://{host_header}")
    return parsed is not None and parsed[1:] == origin[1:]


def origin_allowed(header: str | None, host_header: str | None,
                   allowed: frozenset[Origin]) -> bool:
    """A handshake's `Origin` header: absent (not a browser), the proxy's own, or allowed."""
    if header is None:
        return True
    origin = parse_origin(header)
    if origin is None:
        return False
    return origin in allowed or (host_header is not None and same_origin(origin, host_header))


def is_json(content_type: str | None) -> bool:
    """`application/json` or `application/<anything>+json`, parameters (charset) aside."""
    if content_type is None:
        return False
    kind = content_type.partition(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))
