"""web/errors.py `ErrorAnswers`, run by the front middleware: each exception a request raises is
mapped once, as Starlette's three layers mapped it (a registered one answered by its handler
where it was raised, anything else the OpenAI-shaped 500 after the access line, logged with the
request id and raised on for the server)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.web.errors import ErrorAnswers
from proxy.web.middleware.front import Front
from tests.support.inprocess import post_scope

App = Callable[[Any, Any, Any], Awaitable[None]]


async def _run(app: App) -> tuple[list[dict[str, Any]], BaseException | None]:
    """`app` behind the front middleware with the error answers, in a task of its own as the
    server runs a request; what it sent, and what it raised."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = post_scope("/v1/x", b"")
    scope["headers"].append((b"x-request-id", b"err-1"))
    front = Front(app, errors=ErrorAnswers())
    try:
        await asyncio.create_task(front(scope, receive, send))
    except Exception as exc:  # what the server would see
        return sent, exc
    return sent, None


def _ids(message: dict[str, Any]) -> list[bytes]:
    return [value for name, value in message["headers"] if name == b"x-request-id"]


async def test_a_registered_error_is_answered_where_it_was_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise InvalidRequest("bad input", param="input")

    with caplog.at_level(logging.INFO):
        sent, raised = await _run(app)
    assert raised is None
    assert sent[0]["status"] == 400 and _ids(sent[0]) == [b"err-1"]
    assert orjson.loads(sent[1]["body"])["error"]["param"] == "input"
    [access] = [r for r in caplog.records if r.name == "proxy.access"]
    assert access.access["status"] == 400  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.name == "proxy.web"]


async def test_an_unexpected_error_is_a_500_after_the_access_line_and_raised_on(
        caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise KeyError("bug")

    with caplog.at_level(logging.INFO):
        sent, raised = await _run(app)
    assert isinstance(raised, KeyError)
    assert sent[0]["status"] == 500 and _ids(sent[0]) == [b"err-1"]
    assert orjson.loads(sent[1]["body"])["error"]["type"] == "server_error"
    names = [r.name for r in caplog.records]
    assert names == ["proxy.access", "proxy.web"]  # the access line first, as before
    assert caplog.records[1].exc_info is not None
    assert caplog.records[0].access["status"] == 500  # type: ignore[attr-defined]


async def test_an_error_once_the_answer_started_sends_nothing_more(
        caplog: pytest.LogCaptureFixture) -> None:
    """A registered error after the response's start cannot be answered: it is then an
    unexpected one (Starlette's `RuntimeError`), logged, the status already sent counted."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise InvalidRequest("too late")

    with caplog.at_level(logging.INFO):
        sent, raised = await _run(app)
    assert isinstance(raised, RuntimeError)
    assert isinstance(raised.__cause__, InvalidRequest)
    assert [m["type"] for m in sent] == ["http.response.start"]
    [access] = [r for r in caplog.records if r.name == "proxy.access"]
    assert access.access["status"] == 200  # type: ignore[attr-defined]
    assert [r.name for r in caplog.records if r.name == "proxy.web"] == ["proxy.web"]
