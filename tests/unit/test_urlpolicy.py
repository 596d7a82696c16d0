"""The URL allow-list rules (core/policy/urlpolicy.py) every outbound fetch of the proxy reads."""

from __future__ import annotations

import pytest

from proxy.core.policy.urlpolicy import (
    UrlRefused,
    address_allowed,
    check,
    parse_prefix,
    parse_target,
    remove_dot_segments,
)


@pytest.mark.parametrize(("path", "normal"), [
    # RFC 3986 §5.2.4 and §5.4's examples
    ("/a/b/c/./../../g", "/a/g"), ("mid/content=5/../6", "mid/6"), ("/a/b/../../../x", "/x"),
    ("/mcp/..", "/"), ("/mcp/.", "/mcp/"), ("/a//b", "/a//b"), ("/", "/")])
def test_dot_segments_are_removed_as_rfc_3986_says(path: str, normal: str) -> None:
    assert remove_dot_segments(path) == normal


def allowed(url: str, *prefixes: str, host_required: bool = True) -> bool:
    try:
        check(url, tuple(parse_prefix(p, host_required=host_required) for p in prefixes), "x")
    except UrlRefused:
        return False
    return True


@pytest.mark.parametrize(("url", "prefix", "ok"), [
    ("http://h/mcp", "http://h/mcp", True),
    ("http://h/mcp/x", "http://h/mcp", True),
    ("http://h/mcpx", "http://h/mcp", False),  # whole segments only
    ("http://h/mcp", "http://h/mcp/", False),  # a trailing slash: only what is under it
    ("http://h/mcp/", "http://h/mcp/", True),
    ("http://h:80/mcp", "http://h/mcp", True),  # the default port filled in
    ("http://h:81/mcp", "http://h/mcp", False),
    ("http://h:81/mcp", "http://h", True),  # a bare host: any port
    ("http://h:81/mcp", "http://h:", True),
    ("https://h/mcp", "http://h:", False),
    ("http://h.evil/mcp", "http://h", False),
    ("http://[::1]:9/x", "http://[::1]:", True),
    ("http://[0:0::1]:9/x", "http://[::1]:", True),  # IP literals in canonical form
    ("http://h/mcp/../admin", "http://h/", False),
    ("http://h/a?next=../../x", "http://h/a", True),  # a query is not a path
])
def test_prefixes_compare_scheme_host_port_and_whole_segments(url: str, prefix: str,
                                                              ok: bool) -> None:
    assert allowed(url, prefix) is ok


def test_a_prefix_without_a_host_admits_public_hosts_of_its_scheme_only() -> None:
    assert allowed("https://img.example/cat.png", "https://", host_required=False)
    assert not allowed("http://img.example/cat.png", "https://", host_required=False)
    for private in ("https://169.254.169.254/latest/meta-data/", "https://127.0.0.1/",
                    "https://[::1]/", "https://10.1.2.3/", "https://[fd00::1]/"):
        assert not allowed(private, "https://", host_required=False), private
    with pytest.raises(UrlRefused):
        parse_prefix("https://")  # MCP prefixes name a host


def test_prefixes_naming_a_private_host_allow_its_private_addresses() -> None:
    assert parse_prefix("http://127.0.0.1:").private_ok
    assert parse_prefix("http://localhost/mcp").private_ok
    assert not parse_prefix("https://tools.corp/").private_ok
    assert not parse_prefix("https://", host_required=False).private_ok
    assert address_allowed("10.0.0.1", True) and not address_allowed("10.0.0.1", False)


@pytest.mark.parametrize("url", [
    "http://h/a/../b", "http://h/a/./b", "http://h/%2e%2e/b", "http://h/%2E./b", "http://h/a%2Fb",
    "http://h/a%5cb", "http://h/a\\b", "http://u:p@h/", "http://h%2f/", "file:///etc/passwd",
    "http:///x", "http://h:99999/", "http://h/a b", "http://h/\n"])
def test_urls_out_of_normal_form_are_refused(url: str) -> None:
    with pytest.raises(UrlRefused):
        parse_target(url)


def test_the_normal_form_lowercases_and_encodes_the_host() -> None:
    target = parse_target("HTTPS://Bücher.Example:443/a?b=1#frag")
    assert (target.scheme, target.host, target.port) == ("https", "xn--bcher-kva.example", 443)
    assert target.url == "https://xn--bcher-kva.example:443/a?b=1"


# Every v6 spelling that embeds an IPv4 address is judged by that address.
def _v6_spellings(v4: str) -> list[str]:
    import ipaddress

    n = int(ipaddress.IPv4Address(v4))
    hi, lo = f"{n >> 16:x}", f"{n & 0xFFFF:x}"
    inverted = n ^ 0xFFFFFFFF
    return [f"::ffff:{v4}", f"::ffff:0:{v4}", f"::{v4}", f"::{hi}:{lo}", f"64:ff9b::{v4}",
            f"64:ff9b::{hi}:{lo}", f"64:ff9b:1::{v4}", f"64:ff9b:1:{hi}:{lo}::",
            f"2002:{hi}:{lo}::1", f"2002:{hi}:{lo}:1:2:3:4:5",
            # Teredo: a public server (65.54.227.120), the client bit-inverted in the tail
            f"2001:0:4136:e378:8000:63bf:{inverted >> 16:x}:{inverted & 0xFFFF:x}"]


@pytest.mark.parametrize("v4", ["169.254.169.254", "127.0.0.1", "10.0.0.1"])
def test_v6_addresses_embedding_a_private_ipv4_are_refused(v4: str) -> None:
    for v6 in _v6_spellings(v4):
        assert not address_allowed(v6, False), v6
        assert address_allowed(v6, True), v6  # a prefix naming it explicitly still may
        with pytest.raises(UrlRefused, match="private address"):
            check(f"https://[{v6}]/x.png", (parse_prefix("https://", host_required=False),),
                  "--fetch-allow")


def test_v6_addresses_embedding_a_public_ipv4_stay_allowed() -> None:
    for v6 in _v6_spellings("8.8.8.8"):
        if v6.startswith("64:ff9b:1:"):
            continue  # the local-use NAT64 prefix is judged not global (urlpolicy says why)
        assert address_allowed(v6, False), v6
    assert address_allowed("2606:4700:4700::1111", False)  # plain public v6 unchanged
    assert not address_allowed("64:ff9b:1::808:808", False)
