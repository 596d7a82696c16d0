"""Request tolerance through the app (docs/contract.md "Request tolerance"): unknown fields ignored
and named, hosted tools dropped and named, in headers that reach JSON and SSE clients alike;
`--params strict` / `--hosted-tools reject` keep the 400s. The simulator is the upstream, and
its record of the last chat request shows what the fleet was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.conftest import SimControl
from tests.integration.test_http_errors import assert_openai_error, proxy_for
from tests.support.conformance import check_stream
from tests.support.sse import data_payloads

LOOKUP = {"type": "function", "name": "lookup",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


@pytest.fixture
async def strict(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for http in proxy_for(settings.replace(params="strict", hosted_tools="reject")):
        yield http


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-model", "input": "hello", "store": False, **fields}


async def test_unknown_fields_are_ignored_and_named_on_json(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v1/responses", json=body(colour="red", shade=1))
    assert response.status_code == 200, response.text
    assert response.headers["x-proxy-ignored-params"] == "colour,shade"
    assert "x-proxy-dropped-tools" not in response.headers
    assert response.json()["output"][0]["content"][0]["text"] == "You said: hello"


async def test_a_clean_request_gets_no_tolerance_headers(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v1/responses", json=body())
    assert response.status_code == 200, response.text
    assert "x-proxy-ignored-params" not in response.headers
    assert "x-proxy-dropped-tools" not in response.headers


async def test_hosted_tools_are_dropped_and_named_on_sse(asgi_client: httpx.AsyncClient,
                                                         sim: SimControl) -> None:
    response = await asgi_client.post("/v1/responses", json=body(
        stream=True, colour="red",
        tools=[{"type": "web_search", "external_web_access": False}, LOOKUP,
               {"type": "image_generation"}]))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-proxy-dropped-tools"] == "web_search,image_generation"
    assert response.headers["x-proxy-ignored-params"] == "colour"
    events = data_payloads(response.content)
    check_stream(events)
    assert [t["name"] for t in events[-1]["response"]["tools"]] == ["lookup"]
    sent = sim.stats()["last_request"]
    assert [t["function"]["name"] for t in sent["tools"]] == ["lookup"]


async def test_strict_mode_refuses_unknown_fields(strict: httpx.AsyncClient) -> None:
    error = assert_openai_error(await strict.post("/v1/responses", json=body(colour="red")),
                                400, param="colour")
    assert error["message"] == "Unknown parameter: 'colour'."


async def test_reject_mode_refuses_hosted_tools(strict: httpx.AsyncClient) -> None:
    response = await strict.post("/v1/responses", json=body(tools=[LOOKUP,
                                                                   {"type": "web_search"}]))
    assert_openai_error(response, 400, param="tools[1].type")


async def test_forcing_a_dropped_tool_is_400(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v1/responses", json=body(
        tools=[{"type": "web_search"}], tool_choice={"type": "web_search"}))
    assert_openai_error(response, 400, param="tool_choice.type")


async def test_penalties_reach_the_fleet_and_are_echoed(asgi_client: httpx.AsyncClient,
                                                        sim: SimControl) -> None:
    response = await asgi_client.post("/v1/responses", json=body(presence_penalty=0.5,
                                                             frequency_penalty=-1))
    assert response.status_code == 200, response.text
    sent = sim.stats()["last_request"]
    assert sent["presence_penalty"] == 0.5 and sent["frequency_penalty"] == -1
    echo = response.json()
    assert echo["presence_penalty"] == 0.5 and echo["frequency_penalty"] == -1
    assert echo["temperature"] == 1.0 and echo["top_p"] == 1.0 and echo["top_logprobs"] == 0
    assert isinstance(echo["completed_at"], int)
    bad = await asgi_client.post("/v1/responses", json=body(presence_penalty=3))
    assert_openai_error(bad, 400, param="presence_penalty")


async def test_an_assistant_phase_is_kept_in_the_stored_input_items(
        asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "input": [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": "working on it", "phase": "commentary"},
            {"role": "user", "content": "go on"}]})
    assert response.status_code == 200, response.text
    items = await asgi_client.get(f"/v1/responses/{response.json()['id']}/input_items",
                             params={"order": "asc"})
    assert [i.get("phase") for i in items.json()["data"]] == [None, "commentary", None]


async def test_a_json_schema_format_echo_carries_a_null_description(
        asgi_client: httpx.AsyncClient) -> None:
    fmt = {"type": "json_schema", "name": "answer", "strict": True,
           "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                      "required": ["a"], "additionalProperties": False}}
    response = await asgi_client.post("/v1/responses", json=body(text={"format": fmt}))
    assert response.status_code == 200, response.text
    echoed = response.json()["text"]["format"]
    assert "description" in echoed and echoed["description"] is None


async def test_a_background_job_restores_namespaced_and_custom_calls(
        asgi_client: httpx.AsyncClient) -> None:
    """The worker rebuilds the name map from the stored response's tools alone."""
    tools = [{"type": "custom", "name": "apply_patch"},
             {"type": "namespace", "name": "crm", "description": "CRM", "tools": [LOOKUP]}]
    created = await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "background": True, "tools": tools,
        "input": "use crm__lookup and apply_patch [[sim tools=2]]"})
    assert created.status_code == 200, created.text
    response_id = created.json()["id"]
    final: dict[str, Any] = {}
    for _ in range(100):  # bounded: 10 s at most
        final = (await asgi_client.get(f"/v1/responses/{response_id}")).json()
        if final["status"] not in ("queued", "in_progress"):
            break
        await asyncio.sleep(0.1)
    assert final["status"] == "completed", final
    calls = [(i["type"], i["name"], i.get("namespace")) for i in final["output"]]
    assert calls == [("custom_tool_call", "apply_patch", None),
                     ("function_call", "lookup", "crm")]
    replay = await asgi_client.get(f"/v1/responses/{response_id}", params={"stream": "true"})
    check_stream(data_payloads(replay.content))


async def test_a_chained_follow_up_sends_the_calls_flat(asgi_client: httpx.AsyncClient,
                                                       sim: SimControl) -> None:
    tools = [{"type": "custom", "name": "apply_patch"},
             {"type": "namespace", "name": "crm", "description": "CRM", "tools": [LOOKUP]}]
    first = await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "tools": tools,
        "input": "use crm__lookup and apply_patch [[sim tools=2]]"})
    assert first.status_code == 200, first.text
    patch, lookup = first.json()["output"]
    second = await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "tools": tools, "previous_response_id": first.json()["id"],
        "input": [{"type": "custom_tool_call_output", "call_id": patch["call_id"],
                   "output": "patched"},
                  {"type": "function_call_output", "call_id": lookup["call_id"],
                   "output": "found"}]})
    assert second.status_code == 200, second.text
    messages = sim.stats()["last_request"]["messages"]
    calls = messages[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["apply_patch", "crm__lookup"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"input": patch["input"]}
    assert [(m["role"], m["content"]) for m in messages[2:]] == [("tool", "patched"),
                                                                 ("tool", "found")]
    assert second.json()["output"][-1]["type"] == "message"
