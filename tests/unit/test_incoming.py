"""web/incoming.py reads the scope's headers as Starlette's `Headers` give them
(web/middleware/auth.py `header`: the create reads two, 3.7 µs through `Headers`, 1.6 so)."""

from __future__ import annotations

from starlette.requests import Request

from proxy.web.middleware.auth import header
from tests.support.inprocess import post_scope


def test_a_header_is_the_first_of_its_name_as_starlette_gives_it() -> None:
    scope = post_scope("/v1/responses", b"{}")
    scope["headers"] = [(b"cache-control", b"no-store"), (b"cache-control", b"x"),
                        (b"x-note", b"\xe9t\xe9")]
    request = Request(scope)
    for name in ("cache-control", "x-note", "content-type"):
        assert header(request.scope, name.encode("latin-1")) == request.headers.get(name)
