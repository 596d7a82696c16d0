"""web/incoming.py `read_body`: `Request.body()` without Starlette's generator, the same
messages read, the same `ClientDisconnect`, the body kept for Starlette's own `body()`."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from proxy.web.incoming import read_body


def _request(*messages: dict[str, Any]) -> tuple[Request, list[dict[str, Any]]]:
    left = list(messages)

    async def receive() -> dict[str, Any]:
        assert left, "read past the body"
        return left.pop(0)

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []},
                   receive), left


async def test_a_body_in_one_message_is_read_once_and_kept() -> None:
    request, left = _request({"type": "http.request", "body": b'{"a":1}'},
                             {"type": "http.disconnect"})
    assert await read_body(request) == b'{"a":1}'
    assert await request.body() == b'{"a":1}'  # Starlette's own finds it, reads nothing
    assert await read_body(request) == b'{"a":1}'
    assert len(left) == 1


async def test_a_body_in_parts_is_joined() -> None:
    request, left = _request({"type": "http.request", "body": b"ab", "more_body": True},
                             {"type": "http.request", "body": b"", "more_body": True},
                             {"type": "http.request", "body": b"cd"})
    assert await read_body(request) == b"abcd"
    assert await request.body() == b"abcd" and not left


async def test_a_client_that_leaves_mid_body_is_a_client_disconnect() -> None:
    request, _ = _request({"type": "http.request", "body": b"ab", "more_body": True},
                          {"type": "http.disconnect"})
    with pytest.raises(ClientDisconnect):
        await read_body(request)
    assert await request.is_disconnected()


async def test_an_empty_body_is_empty() -> None:
    request, _ = _request({"type": "http.request"})
    assert await read_body(request) == b""
    assert await request.body() == b""
