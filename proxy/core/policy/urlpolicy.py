"""URLs the proxy connects to on a client's word (MCP servers, images, files): which ones an
operator's prefixes admit, decided on one normal form. Pure: resolving a name and connecting to
the vetted address is proxy/upstream/egress.py.

    "https://Tools.corp:443/mcp/x?q" ─ parse_target ─▶ Target(https, tools.corp, 443, (mcp, x))
    "https://tools.corp/mcp"         ─ parse_prefix ─▶ Prefix(https, tools.corp, any port, (mcp,))
    admitting(target, prefixes) → the first prefix that admits the target, or None

Each rule closes a way around an allow-list (an SSRF surface):
- Only http(s), a host, no user info. The host is lower-cased and IDNA-encoded, an IP literal
  written in its canonical form, and the port filled in from the scheme: `http://h` and
  `http://h:80` are one target. A `%` or `\\` in the authority is refused.
- The path must already be in normal form: no dot segments (`/mcp/../admin` is sent as `/admin`
  by an HTTP client, after any check of ours), no percent-encoded `.`, `/` or `\\` and no `\\`
  (servers and proxies decode those into separators and dot segments of their own). Such a URL
  is refused, not rewritten: what was checked is exactly what is sent, and no honest client
  needs one.
- A prefix matches by parts, never by string: scheme and host equal; the port equal, or any
  port when the prefix is a bare host (`http://h` and `http://h:` admit h on any port); the
  path by whole segments (`/mcp` admits `/mcp` and `/mcp/x`, never `/mcpx`; `/mcp/` only what
  is under it). A prefix without a host (`https://`, for `--fetch-allow`) admits every host of
  its scheme.
- Addresses: a public one always; any other (loopback, private, link-local such as the cloud
  metadata service 169.254.169.254, unique-local v6, ...) only when the admitting prefix names
  its host as an IP literal or `localhost`: reaching a private address must be the operator's
  explicit choice, never the result of a client's URL or a DNS answer. A v6 address that
  embeds an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo: `embedded_ipv4`) is judged by
  that IPv4 address, where the packet ends up: in an IPv6-only cluster with DNS64 any name may
  answer `64:ff9b::a9fe:a9fe`, which is the metadata service.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
# v6 networks whose last 32 bits are an IPv4 address the packet is delivered to:
# IPv4-compatible (::/96, deprecated but still routed by some stacks), SIIT's IPv4-translated
# (::ffff:0:0:0/96) and the well-known NAT64 prefix (RFC 6052).
_LOW_32_NETS = (ipaddress.IPv6Network("::/96"), ipaddress.IPv6Network("::ffff:0:0:0/96"),
                ipaddress.IPv6Network("64:ff9b::/96"))
# The local-use NAT64 prefix (RFC 8215): its operator picks where the IPv4 sits in it (any of
# RFC 6052's layouts), so no one reading is sure; IANA lists it as not globally reachable,
# which is how it is judged (Python's table predates it). A prefix naming it admits it.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
# Percent-encodings that decode to a separator or to the dot of a dot segment (any case).
_ENCODED_SEPARATORS = ("%2e", "%2f", "%5c")


class UrlRefused(ValueError):
    """The URL (or prefix) cannot be admitted; the message says why, for a 400."""


@dataclass(frozen=True, slots=True)
class Target:
    """A URL in the normal form every check reads. `url` is what the client connects to."""

    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]  # the path split on "/", without the leading empty one
    url: str

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The host as an address when it is an IP literal."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Prefix:
    scheme: str
    host: str | None  # None: every host
    port: int | None  # None: every port
    segments: tuple[str, ...]
    text: str

    @property
    def private_ok(self) -> bool:
        """The prefix names its host as an IP literal or `localhost`: the operator chose it,
        so its addresses may be private."""
        return self.host is not None and (self.host == "localhost" or _is_ip(self.host))

    def admits(self, target: Target) -> bool:
        if target.scheme != self.scheme:
            return False
        if self.host is not None and target.host != self.host:
            return False
        if self.port is not None and target.port != self.port:
            return False
        return _under(target.segments, self.segments)


def parse_target(url: str) -> Target:
    """`url` in normal form. Raises UrlRefused saying what is wrong with it."""
    parts = _split(url)
    if not parts.hostname:
        raise UrlRefused("the URL has no host")
    host = _host(parts)
    port = _port(parts)
    path = parts.path or "/"
    lowered = path.lower()
    if "\\" in path or any(code in lowered for code in _ENCODED_SEPARATORS):
        raise UrlRefused("the URL's path holds an encoded '.', '/' or '\\', or a '\\'")
    if remove_dot_segments(path) != path:
        raise UrlRefused("the URL's path holds '.' or '..' segments")
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if parts.port is None else f"{shown}:{port}"
    query = f"?{parts.query}" if parts.query else ""
    return Target(parts.scheme, host, port, tuple(path.split("/")[1:]),
                  f"{parts.scheme}://{netloc}{path}{query}")


def parse_prefix(text: str, *, host_required: bool = True) -> Prefix:
    """An allow-list entry. `http://h:` (a colon, no port) admits h on any port; without a host
    (`https://`) every host, where `host_required` is false. Raises UrlRefused."""
    parts = _split(text)
    if parts.query or parts.fragment:
        raise UrlRefused("a prefix cannot hold a query or a fragment")
    if not parts.hostname:
        if host_required or parts.netloc or parts.path:
            raise UrlRefused("the prefix has no host")
        return Prefix(parts.scheme, None, None, (), text)
    # Any port: a bare `http://h` (as before) or `http://h:`; a prefix with a path and no port
    # means the scheme's own.
    any_port = parts.port is None and (text.endswith(":") or not parts.path)
    path = parts.path or "/"
    if remove_dot_segments(path) != path:
        raise UrlRefused("the prefix's path holds '.' or '..' segments")
    return Prefix(parts.scheme, _host(parts), None if any_port else _port(parts),
                  tuple(path.split("/")[1:]), text)


def admitting(target: Target, prefixes: tuple[Prefix, ...]) -> Prefix | None:
    for prefix in prefixes:
        if prefix.admits(target):
            return prefix
    return None


def address_allowed(address: str, private_ok: bool) -> bool:
    """A resolved address may be connected to: a public one always, any other only when the
    admitting prefix named a private host explicitly (`private_ok`)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if private_ok:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return False
        embedded = embedded_ipv4(ip)
        if embedded:
            # The packet ends at the IPv4 host (a NAT64 gateway, a 6to4 or Teredo relay):
            # `64:ff9b::a9fe:a9fe` is 169.254.169.254, whatever v6 says of its prefix.
            return all(v4.is_global for v4 in embedded)
    return ip.is_global


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses a v6 one stands for (empty: none): IPv4-mapped `::ffff:a.b.c.d`,
    SIIT's `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4
    `2002:AABB:CCDD::` and Teredo `2001:0:SERVER:...:~CLIENT` (its server and its client)."""
    value = int(ip)
    low = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if any(ip in net for net in _LOW_32_NETS):
        return (low,)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo
    return ()


def check(url: str, prefixes: tuple[Prefix, ...], what: str) -> tuple[Target, Prefix]:
    """(the target, its admitting prefix). `what` names the allow-list in the refusal. An IP
    literal outside the public space is refused here already, unless the prefix named it."""
    target = parse_target(url)
    prefix = admitting(target, prefixes)
    if prefix is None:
        raise UrlRefused(f"the URL is not allowed by this server's {what} list")
    if target.ip is not None and not address_allowed(target.host, prefix.private_ok):
        raise UrlRefused(f"the URL names a private address, which {what} did not name "
                         "explicitly")
    return target, prefix


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4."""
    out: list[str] = []
    rest = path
    while rest:
        if rest.startswith("../"):
            rest = rest[3:]
        elif rest.startswith("./"):
            rest = rest[2:]
        elif rest.startswith("/./") or rest == "/.":
            rest = "/" + rest[3:]
        elif rest.startswith("/../") or rest == "/..":
            rest = "/" + rest[4:]
            if out:
                out.pop()
        elif rest in (".", ".."):
            rest = ""
        else:
            cut = rest.find("/", 1)
            cut = len(rest) if cut < 0 else cut
            out.append(rest[:cut])
            rest = rest[cut:]
    return "".join(out)


def _split(url: str) -> SplitResult:
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise UrlRefused("the URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError as exc:
        raise UrlRefused(f"the URL cannot be parsed ({exc})") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise UrlRefused("only http and https URLs are allowed")
    if "@" in parts.netloc:
        raise UrlRefused("URLs with user info are not allowed")
    if "%" in parts.netloc or "\\" in parts.netloc:
        raise UrlRefused("the URL's host holds a '%' or a '\\'")
    return parts


def _host(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if _is_ip(host):
        return str(ipaddress.ip_address(host))
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise UrlRefused("the URL's host is not a valid name") from None


def _port(parts: SplitResult) -> int:
    return parts.port if parts.port is not None else DEFAULT_PORTS[parts.scheme]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _under(segments: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    """Whole-segment prefix: (mcp,) admits (mcp,) and (mcp, x); (mcp, "") only (mcp, ...)."""
    if prefix and prefix[-1] == "":  # a trailing slash: something under it
        prefix = prefix[:-1]
        return len(segments) > len(prefix) and segments[:len(prefix)] == prefix
    return segments[:len(prefix)] == prefix
