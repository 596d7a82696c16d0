"""Tool search and added tools through the app, the simulator as the fleet (its record of the
last chat request shows what the model was offered): 200 deferred tools, of which the model
sees only the search function until it searches, then only what it found, in this response
and in those that continue it, read back from a second instance sharing the Redis. Every item
and event checked against the SDK's types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from proxy.settings import Settings
from tests.conftest import SimControl
from tests.integration.test_http_errors import proxy_for
from tests.support.conformance import check_stream
from tests.support.inprocess import until
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads
from tests.unit.test_toolsearch import deferred_tools

ITEMS = TypeAdapter(list[ResponseItem])
SEARCH = '[[sim call=tool_search call_args={"query":"weather_forecast_city"}]]'


def offered(sim: SimControl) -> list[str]:
    return [f["function"]["name"] for f in sim.stats()["last_request"].get("tools") or ()]


def valid(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    Response.model_validate(body, strict=True)
    return body


@pytest.fixture
def shared(simulator: ServerProcess, redis_server: ServerProcess) -> Settings:
    return Settings.of(upstreams=(simulator.url,),
                       redis_url=f"redis://127.0.0.1:{redis_server.port}/9")


@pytest.fixture
async def first(shared: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for http in proxy_for(shared):
        yield http


@pytest.fixture
async def second(shared: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for http in proxy_for(shared):
        yield http


def searching(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "sim-model", "input": text,
            "tools": [{"type": "function", "name": "always"}, *deferred_tools(200),
                      {"type": "tool_search"}], **fields}


async def test_a_search_over_200_deferred_tools_loads_only_what_it_found(
        first: httpx.AsyncClient, second: httpx.AsyncClient, sim: SimControl) -> None:
    # What the first upstream turn is offered: the same request, answered without a call.
    valid(await first.post("/v1/responses", json=searching("hello [[sim tools=0]]")))
    assert offered(sim) == ["always", "tool_search"]
    assert len(sim.stats()["last_request"]["tools"]) == 2

    body = valid(await first.post("/v1/responses", json=searching(f"forecast? {SEARCH}")))
    # the second upstream turn, after the search: only what it found joined
    assert offered(sim) == ["always", "tool_search", "get_weather_forecast"]
    call, output, message = body["output"]
    assert (call["type"], call["execution"], call["status"]) == (
        "tool_search_call", "server", "completed")
    assert call["arguments"] == {"query": "weather_forecast_city"}
    assert output["type"] == "tool_search_output" and output["call_id"] == call["call_id"]
    assert [t["name"] for t in output["tools"]] == ["get_weather_forecast"]
    assert message["content"][0]["text"].startswith("Tool results: tool_search=")
    assert len(body["tools"]) == 183  # echoed as sent: 200 tools in 181 entries, and 2

    # A second instance reads it back, replays it, and continues the chain: the found tool
    # stays loaded, and the model's call of it comes back to the client under its name.
    stored = valid(await second.get(f"/v1/responses/{body['id']}"))
    assert stored["output"] == body["output"]
    replay = await second.get(f"/v1/responses/{body['id']}", params={"stream": "true"})
    events = [e for e in data_payloads(replay.text) if e != "[DONE]"]
    check_stream(events)
    assert events[-1]["response"]["output"] == body["output"]
    after = valid(await second.post("/v1/responses", json=searching(
        "now call it [[sim call=get_weather_forecast]]", previous_response_id=body["id"])))
    assert offered(sim) == ["always", "tool_search", "get_weather_forecast"]
    (called,) = after["output"]
    assert (called["type"], called["name"]) == ("function_call", "get_weather_forecast")


async def test_a_background_search_runs_from_its_job_spec(
        first: httpx.AsyncClient, second: httpx.AsyncClient, sim: SimControl) -> None:
    """The worker (on either instance) runs the search from the job's spec alone."""
    queued = valid(await first.post("/v1/responses", json=searching(
        f"later {SEARCH}", background=True)))
    done: dict[str, Any] = {}

    async def ended() -> bool:
        done.update(valid(await second.get(f"/v1/responses/{queued['id']}")))
        return done["status"] not in ("queued", "in_progress")

    await until(ended)
    assert done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == [
        "tool_search_call", "tool_search_output", "message"]
    assert [t["name"] for t in done["output"][1]["tools"]] == ["get_weather_forecast"]
    assert offered(sim) == ["always", "tool_search", "get_weather_forecast"]


async def test_a_background_call_of_an_added_namespaced_tool_keeps_its_namespace(
        first: httpx.AsyncClient, second: httpx.AsyncClient) -> None:
    added = {"type": "additional_tools", "role": "developer", "tools": [
        {"type": "namespace", "name": "files", "description": "Files.",
         "tools": [{"type": "function", "name": "read_file"}]}]}
    queued = valid(await first.post("/v1/responses", json={
        "model": "sim-model", "background": True,
        "input": [added, {"role": "user", "content": "[[sim call=files__read_file]]"}]}))
    done: dict[str, Any] = {}

    async def ended() -> bool:
        done.update(valid(await second.get(f"/v1/responses/{queued['id']}")))
        return done["status"] not in ("queued", "in_progress")

    await until(ended)
    (called,) = done["output"]
    assert (called["name"], called.get("namespace")) == ("read_file", "files")


async def test_a_streamed_search_validates_event_by_event(
        first: httpx.AsyncClient, sim: SimControl) -> None:
    response = await first.post("/v1/responses", json=searching(
        f"namespaced? {SEARCH.replace('weather_forecast_city', 'customer_account_3')}",
        stream=True))
    assert response.status_code == 200, response.text
    events = [e for e in data_payloads(response.text) if e != "[DONE]"]
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["tool_search_call", "tool_search_output", "message"]
    (crm,) = output[1]["tools"]
    assert crm["type"] == "namespace" and crm["tools"][0]["name"] == "lookup_customer_3"
    assert "crm__lookup_customer_3" in offered(sim)
    assert not any(name.startswith("inventory") for name in offered(sim))


async def test_a_client_search_returns_the_call_and_its_output_loads(
        first: httpx.AsyncClient, second: httpx.AsyncClient, sim: SimControl) -> None:
    tools = [{"type": "tool_search", "execution": "client"}]
    body = valid(await first.post("/v1/responses", json={
        "model": "sim-model", "tools": tools,
        "input": '[[sim call=tool_search call_args={"query":"mail"}]]'}))
    (call,) = body["output"]
    assert (call["type"], call["execution"], call["status"]) == (
        "tool_search_call", "client", "completed")
    assert body["status"] == "completed"
    answer = {"type": "tool_search_output", "execution": "client", "call_id": call["call_id"],
              "tools": [{"type": "function", "name": "send_mail", "description": "Mail."}]}
    after = valid(await second.post("/v1/responses", json={
        "model": "sim-model", "tools": tools, "previous_response_id": body["id"],
        "input": [answer, {"role": "user", "content": "[[sim call=send_mail]]"}]}))
    assert offered(sim) == ["tool_search", "send_mail"]
    assert after["output"][0]["name"] == "send_mail"
    items = await second.get(f"/v1/responses/{after['id']}/input_items")
    assert items.status_code == 200, items.text
    listed = ITEMS.validate_python(items.json()["data"], strict=True)
    assert "tool_search_output" in [i.type for i in listed]


async def test_additional_tools_are_offered_echoed_and_kept_along_the_chain(
        first: httpx.AsyncClient, second: httpx.AsyncClient, sim: SimControl) -> None:
    added = {"type": "additional_tools", "role": "developer", "tools": [
        {"type": "namespace", "name": "files", "description": "Files.",
         "tools": [{"type": "function", "name": "read_file"}]}]}
    body = valid(await first.post("/v1/responses", json={
        "model": "sim-model", "tools": [{"type": "function", "name": "base"}],
        "input": [{"role": "user", "content": "hi"}, added,
                  {"role": "user", "content": "[[sim call=files__read_file]]"}]}))
    assert offered(sim) == ["base", "files__read_file"]
    (called,) = body["output"]
    assert (called["name"], called["namespace"]) == ("read_file", "files")
    items = await second.get(f"/v1/responses/{body['id']}/input_items",
                             params={"order": "asc"})
    listed = ITEMS.validate_python(items.json()["data"], strict=True)
    assert [i.type for i in listed] == ["message", "additional_tools", "message"]
    valid(await second.post("/v1/responses", json={
        "model": "sim-model", "previous_response_id": body["id"],
        "input": [{"type": "function_call_output", "call_id": called["call_id"],
                   "output": "text"}]}))
    assert offered(sim) == ["files__read_file"]  # kept along the chain


async def test_found_and_added_tools_stay_loaded_along_a_conversation(
        first: httpx.AsyncClient, second: httpx.AsyncClient, sim: SimControl) -> None:
    conversation = (await first.post("/v1/conversations", json={})).json()["id"]
    added = {"type": "additional_tools", "role": "developer",
             "tools": [{"type": "function", "name": "added_later"}]}
    valid(await first.post("/v1/responses", json=searching(
        f"find it {SEARCH}", conversation=conversation)))
    valid(await first.post("/v1/responses", json={
        "model": "sim-model", "conversation": conversation,
        "input": [added, {"role": "user", "content": "hello [[sim tools=0]]"}]}))
    body = valid(await second.post("/v1/responses", json={
        "model": "sim-model", "conversation": conversation,
        "input": "go on [[sim call=get_weather_forecast]]"}))
    assert offered(sim) == ["get_weather_forecast", "added_later"]
    assert body["output"][0]["name"] == "get_weather_forecast"
    items = await second.get(f"/v1/conversations/{conversation}/items",
                             params={"order": "asc"})
    assert items.status_code == 200, items.text
    kinds = [i["type"] for i in items.json()["data"]]
    assert kinds.count("tool_search_output") == 1 and kinds.count("additional_tools") == 1
    ITEMS.validate_python([i for i in items.json()["data"] if i["type"] != "message"],
                          strict=True)


async def test_effort_max_reaches_the_fleet_as_its_highest(
        asgi_client: httpx.AsyncClient, sim: SimControl) -> None:
    body = valid(await asgi_client.post("/v1/responses", json={
        "model": "sim-reasoner", "input": "hi", "store": False,
        "reasoning": {"effort": "max", "context": "current_turn"}}))
    assert sim.stats()["last_request"]["reasoning_effort"] == "xhigh"
    assert body["reasoning"]["effort"] == "max"
    assert body["reasoning"]["context"] == "current_turn"
