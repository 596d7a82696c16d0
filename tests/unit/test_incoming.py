"""web/incoming.py reads the scope's headers as Starlette's `Headers` give them
(web/middleware/auth.py `header`: the create reads two, 3.7 µs through `Headers`, 1.6 so), and
the body as Starlette's `Request.body()` gives it (`read_body`: without its async generator,
once per request)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from proxy.web.incoming import json_body, read_body
from proxy.web.middleware.auth import header
from tests.support.inprocess import post_scope


def test_a_header_is_the_first_of_its_name_as_starlette_gives_it() -> None:
    scope = post_scope("/v1/responses", b"{}")
    scope["headers"] = [(b"cache-control", b"no-store"), (b"cache-control", b"x"),
                        (b"x-note", b"\xe9t\xe9")]
    request = Request(scope)
    for name in ("cache-control", "x-note", "content-type"):
        assert header(request.scope, name.encode("latin-1")) == request.headers.get(name)


def _request(messages: list[dict[str, Any]]) -> tuple[Request, list[int]]:
    reads = [0]

    async def receive() -> dict[str, Any]:
        reads[0] += 1
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [],
             "query_string": b"", "state": {}}
    return Request(scope, receive), reads


async def test_a_body_in_parts_is_read_whole_and_once() -> None:
    request, reads = _request([
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
    ])
    assert await read_body(request) == b'{"a":1}'
    assert await read_body(request) == b'{"a":1}' and reads == [3]
    assert await json_body(request) == {"a": 1} and reads == [3]


async def test_an_empty_body_is_empty_bytes() -> None:
    request, _ = _request([{"type": "http.request"}])
    assert await read_body(request) == b""


async def test_a_client_gone_before_the_end_is_starlettes_client_disconnect() -> None:
    request, _ = _request([{"type": "http.request", "body": b"{", "more_body": True},
                           {"type": "http.disconnect"}])
    with pytest.raises(ClientDisconnect):
        await read_body(request)


async def test_the_same_as_starlettes_body() -> None:
    parts = [b"x" * 10, b"", b"y" * 3]
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
                for i, part in enumerate(parts)]
    ours, _ = _request(list(messages))
    theirs, _ = _request(list(messages))
    assert await read_body(ours) == await theirs.body()
