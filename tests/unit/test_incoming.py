"""web/incoming.py: the body read in one loop reads what Starlette's `Request.body()` reads;
the scope's headers read as Starlette's `Headers` give them (web/middleware/auth.py `header`)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from proxy.web.incoming import read_body
from proxy.web.middleware.auth import header
from tests.support.inprocess import post_scope


def _request(messages: list[dict[str, Any]]) -> tuple[Request, list[dict[str, Any]]]:
    """A request whose `receive` hands out `messages` in order (what is left: the list)."""
    left = list(messages)

    async def receive() -> dict[str, Any]:
        return left.pop(0)

    return Request(post_scope("/v1/responses", b"{}"), receive), left


@pytest.mark.parametrize("chunks", [[b""], [b'{"a":1}'], [b'{"a"', b"", b':1}']])
async def test_a_body_is_read_whole_and_kept_for_starlettes_own_reads(
        chunks: list[bytes]) -> None:
    messages = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                for i, chunk in enumerate(chunks)]
    request, left = _request(messages)
    assert await read_body(request) == b"".join(chunks)
    assert left == []
    # Read again, by us or by Starlette: the kept bytes, nothing more received.
    assert await read_body(request) == await request.body() == b"".join(chunks)
    assert [chunk async for chunk in request.stream()] == [b"".join(chunks), b""]


async def test_a_client_gone_before_the_end_is_starlettes_client_disconnect() -> None:
    request, _ = _request([{"type": "http.request", "body": b"{", "more_body": True},
                           {"type": "http.disconnect"}])
    with pytest.raises(ClientDisconnect):
        await read_body(request)
    assert await request.is_disconnected()


def test_a_header_is_the_first_of_its_name_as_starlette_gives_it() -> None:
    request, _ = _request([])
    request.scope["headers"] = [(b"cache-control", b"no-store"), (b"cache-control", b"x"),
                                (b"x-note", b"\xe9t\xe9")]
    for name in ("cache-control", "x-note", "content-type"):
        assert header(request.scope, name.encode("latin-1")) == request.headers.get(name)


async def test_a_body_streamed_already_cannot_be_read_again() -> None:
    request, _ = _request([{"type": "http.request", "body": b"{}", "more_body": False}])
    assert [chunk async for chunk in request.stream()] == [b"{}", b""]
    with pytest.raises(RuntimeError, match="Stream consumed"):
        await read_body(request)
