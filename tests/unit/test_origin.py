"""core/policy/origin.py: which browser origins an open proxy serves, which bodies count as JSON."""

from __future__ import annotations

import pytest

from proxy.core.policy.origin import is_json, origin_allowed, parse_origin

ALLOWED = frozenset({("https", "app.example", 443)})


@pytest.mark.parametrize("text, parsed", [
    ("http://localhost:8080", ("http", "localhost", 8080)),
    ("HTTPS://App.Example", ("https", "app.example", 443)),
    ("http://[::1]:8080", ("http", "::1", 8080)),
    ("null", None), ("", None), ("file://", None), ("http://a.example/path", None),
    ("http://user@a.example", None), ("http://a.example:99999", None), ("app.example", None),
])
def test_origins_are_parsed_as_browsers_send_them(text: str, parsed: object) -> None:
    assert parse_origin(text) == parsed


@pytest.mark.parametrize("origin, host, ok", [
    (None, "proxy:8080", True),  # not a browser
    ("http://proxy:8080", "proxy:8080", True),  # the proxy's own page
    ("http://localhost:8080", "localhost:8080", True),
    ("https://proxy.example", "proxy.example", True),  # default port on both sides
    ("https://proxy.example", "proxy.example:443", True),
    ("http://evil.example", "proxy:8080", False),
    ("http://proxy:8081", "proxy:8080", False),  # another port is another origin
    ("https://proxy:8080", "proxy:8080", True),  # TLS ended in front: host and port decide
    ("null", "proxy:8080", False),  # sandboxed frames, file:// pages
    ("http://evil.example", None, False),
    ("https://app.example", "proxy:8080", True),  # --allow-origin
    ("https://app.example:8443", "proxy:8080", False),
])
def test_a_handshake_origin_is_own_allowed_or_refused(origin: str | None, host: str | None,
                                                      ok: bool) -> None:
    assert origin_allowed(origin, host, ALLOWED) is ok


@pytest.mark.parametrize("kind, ok", [
    ("application/json", True), ("application/json; charset=utf-8", True),
    ("Application/JSON", True), ("application/merge-patch+json", True),
    (None, False), ("", False), ("text/plain", False), ("text/plain; a=application/json", False),
    ("application/x-www-form-urlencoded", False), ("multipart/form-data; boundary=x", False),
    ("text/json", False),
])
def test_json_content_types(kind: str | None, ok: bool) -> None:
    assert is_json(kind) is ok
