"""The official `openai` SDK against the proxy (a real uvicorn process) and the simulator:
every client path of `POST /v1/responses`, every event strictly validated with the SDK's own
types and checked against the stream invariants and vLLM's stream rules."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.conftest import SimControl
from tests.support.clients import streamed
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}




def test_non_stream_create(openai_client: openai.OpenAI) -> None:
    response = openai_client.responses.create(model="sim-model", input="hello there",
                                       instructions="be kind", store=False)
    assert response.status == "completed"
    assert response.output_text == "You said: hello there"
    assert response.instructions == "be kind"
    assert response.usage is not None and response.usage.output_tokens == 4
    openai.types.responses.Response.model_validate(response.to_dict(), strict=True)


def test_stream_iteration(openai_client: openai.OpenAI) -> None:
    events = streamed(openai_client, model="sim-model", input="stream me please", store=False)
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "You said: stream me please"
    assert len(deltas) == 5  # one delta per upstream token
    assert events[-1]["type"] == "response.completed"


def test_stream_helper_final_response(openai_client: openai.OpenAI) -> None:
    with openai_client.responses.stream(model="sim-model", input="helper [[sim tokens=9]]",
                                 store=False) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.status == "completed" and len(final.output_text.split()) == 9


def test_reasoning_model(openai_client: openai.OpenAI) -> None:
    events = streamed(openai_client, model="sim-reasoner", input="why is the sky blue",
                      reasoning={"effort": "low"}, store=False)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    reasoning = "".join(e["delta"] for e in events
                        if e["type"] == "response.reasoning_text.delta")
    assert reasoning and final["output"][0]["content"][0]["text"] == reasoning
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def test_function_call_and_the_follow_up_turn(openai_client: openai.OpenAI,
                                              sim: SimControl) -> None:
    events = streamed(openai_client, model="sim-model", input="please call get_weather for Paris",
                      tools=[WEATHER], store=False)
    final = events[-1]["response"]
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]).keys() == {"city"}
    assert final["status"] == "completed"
    follow_up = openai_client.responses.create(
        model="sim-model", tools=[WEATHER], store=False,
        input=[{"role": "user", "content": "please call get_weather for Paris"},
               *calls,
               {"type": "function_call_output", "call_id": calls[0]["call_id"],
                "output": "sunny, 21C"}],
    )
    assert follow_up.status == "completed"
    assert "sunny, 21C" in follow_up.output_text
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == calls[0]["call_id"]
    assert sent[2] == {"role": "tool", "tool_call_id": calls[0]["call_id"],
                       "name": "get_weather", "content": "sunny, 21C"}


def test_two_parallel_calls_are_sequential_items(openai_client: openai.OpenAI) -> None:
    events = streamed(openai_client, model="sim-model", input="call get_weather [[sim tools=2]]",
                      tools=[WEATHER], store=False)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["function_call", "function_call"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [
        0, 1]


class Person(BaseModel):
    name: str
    age: int


def test_parse_with_a_pydantic_text_format(openai_client: openai.OpenAI, sim: SimControl) -> None:
    parsed = openai_client.responses.parse(model="sim-model", input="invent a person",
                                    text_format=Person, store=False)
    assert isinstance(parsed.output_parsed, Person)
    fmt = sim.stats()["last_request"]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Person"


def test_max_output_tokens_gives_incomplete(openai_client: openai.OpenAI) -> None:
    events = streamed(openai_client, model="sim-model", input="a long answer [[sim tokens=50]]",
                      max_output_tokens=5, store=False)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 5
    response = openai_client.responses.create(model="sim-model", input="long [[sim tokens=50]]",
                                       max_output_tokens=5, store=False)
    assert response.status == "incomplete"


@pytest.mark.parametrize("failure", ["error:3", "cut:3"])
def test_mid_stream_upstream_failure_gives_response_failed(openai_client: openai.OpenAI,
                                                           failure: str) -> None:
    events = streamed(openai_client, model="sim-model",
                      input=f"doomed [[sim tokens=10 fail={failure}]]", store=False)
    assert events[-1]["type"] == "response.failed"
    final = events[-1]["response"]
    assert final["error"]["code"] == "server_error" and final["error"]["message"]
    assert final["output"][0]["status"] == "incomplete"  # the open message was closed
    assert sum(e["type"] == "response.output_text.delta" for e in events) == 3


def test_stream_starts_before_the_first_token(proxy: ServerProcess) -> None:
    """created and in_progress go out at once, while the upstream is still thinking."""
    body = {"model": "sim-model", "input": "slow [[sim ttft_ms=1500 tokens=2]]", "stream": True,
            "store": False}
    with httpx.stream("POST", proxy.url + "/v1/responses", json=body, timeout=10) as response:
        first = b""
        for chunk in response.iter_raw():
            first += chunk
            if first.count(b"\n\n") >= 2:
                break
    events = data_payloads(first)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]


def test_errors_before_the_stream_are_http_errors(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.responses.create(model="no-such-model", input="x", stream=True)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        openai_client.responses.create(model="sim-model", input="x", max_output_tokens=10**7)
    # the field the client sent, not vLLM's max_tokens, and the cause's code
    assert "max_output_tokens=10000000 cannot be greater" in str(too_long.value)
    assert too_long.value.param == "max_output_tokens"
    assert too_long.value.code == "integer_above_max_value"
    with pytest.raises(openai.BadRequestError) as builtin:  # hosted tools are dropped, but
        openai_client.responses.create(model="sim-model", input="x",  # forcing one is refused
                                tools=[{"type": "web_search"}], tool_choice={"type": "web_search"})
    assert builtin.value.param == "tool_choice.type"


def test_tool_search_through_the_sdk(openai_client: openai.OpenAI, sim: SimControl) -> None:
    """Deferred tools and a server-run search as the SDK's param types write them; the call
    and output items as its models read them (streamed and not); the client-run search's
    answer sent back as the SDK's `tool_search_output` input item."""
    deferred = [{**WEATHER, "defer_loading": True},
                *({"type": "function", "name": f"stock_{i}", "defer_loading": True,
                   "description": f"Stock of warehouse {i}."} for i in range(30)),
                {"type": "tool_search"}]
    ask = 'weather? [[sim call=tool_search call_args={"query":"weather_city"}]]'
    events = streamed(openai_client, model="sim-model", input=ask, tools=deferred, store=False)
    call, found, _ = events[-1]["response"]["output"]
    assert (call["type"], found["type"]) == ("tool_search_call", "tool_search_output")
    assert [t["name"] for t in found["tools"]] == ["get_weather"]
    response = openai_client.responses.create(model="sim-model", input=ask, tools=deferred)
    assert [item.type for item in response.output] == [
        "tool_search_call", "tool_search_output", "message"]
    client_search = [{"type": "tool_search", "execution": "client"}]
    asked = openai_client.responses.create(
        model="sim-model", tools=client_search,
        input='[[sim call=tool_search call_args={"query":"weather"}]]')
    (searched,) = asked.output
    assert searched.type == "tool_search_call" and searched.execution == "client"
    after = openai_client.responses.create(
        model="sim-model", tools=client_search, previous_response_id=asked.id,
        input=[{"type": "tool_search_output", "execution": "client",
                "call_id": searched.call_id, "tools": [WEATHER]},
               {"role": "user", "content": "[[sim call=get_weather]]"}])
    assert after.output[0].type == "function_call" and after.output[0].name == "get_weather"
