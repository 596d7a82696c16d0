"""Every request limit is a clear 400 naming the parameter, or a 413 for
the body, through the whole app (in-process; the simulator over real HTTP as its fleet)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.core.request.create import MAX_TOOLS
from proxy.core.request.jsonbody import MAX_DEPTH
from proxy.services.responses.conversations import MAX_ITEMS_PER_CALL
from proxy.settings import Settings
from tests.fuzz.harness import check_error_body
from tests.support.inprocess import app_for
from tests.support.servers import ServerProcess

BODY_LIMIT = 64 * 1024
ITEMS = 8
OK: dict[str, Any] = {"model": "sim-model", "input": "hi"}


@pytest.fixture
async def http(simulator: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.of(upstreams=(simulator.url,), max_body_bytes=BODY_LIMIT,
                        max_input_items=ITEMS)
    async with app_for(settings) as (client, _runtime):
        yield client


def _refused(response: httpx.Response, status: int, param: str | None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    check_error_body(status, body, "limit")
    assert body["error"]["param"] == param, body
    return str(body["error"]["message"])


def _tool(i: int) -> dict[str, Any]:
    return {"type": "function", "name": f"f{i}", "parameters": {"type": "object"}}


def _nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": value}
    return value


async def test_each_limit_is_a_clear_error_naming_the_parameter(
        http: httpx.AsyncClient) -> None:
    post = http.post
    message = _refused(await post("/v1/responses", content=b'{"input": "' + b"x" * BODY_LIMIT
                                  + b'"}'), 413, None)
    assert str(BODY_LIMIT) in message
    message = _refused(await post("/v1/responses", json={
        **OK, "input": [{"role": "user", "content": "x"}] * (ITEMS + 1)}), 400, "input")
    assert str(ITEMS) in message
    assert (await post("/v1/responses", json={
        **OK, "input": [{"role": "user", "content": "x"}] * ITEMS})).status_code == 200
    message = _refused(await post("/v1/responses", json={
        **OK, "tools": [_tool(i) for i in range(MAX_TOOLS + 1)]}), 400, "tools")
    assert str(MAX_TOOLS) in message
    _refused(await post("/v1/responses", json={
        **OK, "metadata": {f"k{i}": "v" for i in range(17)}}), 400, "metadata")
    _refused(await post("/v1/responses", json={**OK, "metadata": {"k" * 65: "v"}}), 400,
             "metadata")
    _refused(await post("/v1/responses", json={**OK, "metadata": {"k": "v" * 513}}), 400,
             "metadata.k")
    ok = await post("/v1/responses", json={
        **OK, "metadata": {f"{i:0>64}": "v" * 512 for i in range(16)}})
    assert ok.status_code == 200, ok.text
    # The body object is level 1, `text` 2, `format` 3, `schema` 4: 61 levels fit below it.
    deep_ok = {"type": "json_schema", "name": "x", "schema": _nested(MAX_DEPTH - 4)}
    assert (await post("/v1/responses/input_tokens", json={
        **OK, "text": {"format": deep_ok}})).status_code == 200
    too_deep = {"type": "json_schema", "name": "x", "schema": _nested(MAX_DEPTH - 3)}
    _refused(await post("/v1/responses", json={**OK, "text": {"format": too_deep}}), 400,
             "text")
    conversation = (await post("/v1/conversations", json={})).json()["id"]
    message = _refused(await post(f"/v1/conversations/{conversation}/items", json={
        "items": [{"role": "user", "content": "x"}] * (MAX_ITEMS_PER_CALL + 1)}), 400, "items")
    assert str(MAX_ITEMS_PER_CALL) in message
