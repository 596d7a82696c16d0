"""The simulator as a real server over real sockets: the openai SDK parses every kind of answer,
failures look like a broken vLLM on the wire, pacing holds, and the counters see what happened
(a client that leaves is counted as an abort within a second, even mid-stall)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pydantic
import pytest

from tests.support.servers import ServerProcess, start_simulator
from tests.support.sse import data_payloads

if TYPE_CHECKING:  # only a type: importing tests.conftest would import the whole proxy
    from tests.conftest import SimControl

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}


@pytest.fixture
def sdk(sim: SimControl) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0,
                       timeout=20) as client:
        yield client


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def chat_post(sim: SimControl, text: str, **extra: Any) -> httpx.Response:
    return httpx.post(sim.url + "/v1/chat/completions", timeout=20,
                      json={"model": "sim-model", "messages": user(text), **extra})


def wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


# -- the openai SDK parses every stream kind ---------------------------------------------------
def test_sdk_text_stream_with_usage(sdk: openai.OpenAI) -> None:
    chunks = list(sdk.chat.completions.create(
        model="sim-model", messages=user("hello  there [[sim tokens=6]]"), stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: hello there lorem ipsum"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")


def test_sdk_reasoning_stream(sdk: openai.OpenAI) -> None:
    chunks = list(sdk.chat.completions.create(
        model="sim-reasoner", messages=user("think"), stream=True,
        stream_options={"include_usage": True}, reasoning_effort="low"))
    deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
    reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    assert reasoning.startswith("Let me think") and len(reasoning.split()) == 4
    assert "".join(d["content"] or "" for d in deltas) == "You said: think"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 4


def test_sdk_tool_call_stream_reassembles(sdk: openai.OpenAI) -> None:
    chunks = list(sdk.chat.completions.create(
        model="sim-model", messages=user("please call get_weather city=Lyon [[sim tools=2]]"),
        tools=[WEATHER], stream=True))
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function and delta.function.name) or ""
            call["args"] += (delta.function and delta.function.arguments) or ""
    assert sorted(calls) == [0, 1]
    assert {c["name"] for c in calls.values()} == {"get_weather"}
    assert json.loads(calls[0]["args"]) == {"city": "Lyon", "days": 1}
    assert calls[0]["id"] != calls[1]["id"] and calls[0]["id"].startswith("chatcmpl-tool-")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_sdk_length_stream(sdk: openai.OpenAI) -> None:
    chunks = list(sdk.chat.completions.create(
        model="sim-model", messages=user("a b c d e f"), stream=True, max_tokens=3))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "You said: a"
    assert chunks[-1].choices[0].finish_reason == "length"


class City(pydantic.BaseModel):
    name: str
    population: int


class Trip(pydantic.BaseModel):
    traveller: str
    stops: list[City]
    budget: float | None = None


def test_sdk_json_schema_stream_and_parse(sdk: openai.OpenAI) -> None:
    fmt = {"type": "json_schema",
           "json_schema": {"name": "trip", "schema": Trip.model_json_schema(), "strict": True}}
    chunks = list(sdk.chat.completions.create(
        model="sim-model", messages=user("plan it traveller=Ada"), stream=True,
        response_format=fmt))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    trip = Trip.model_validate_json(content)
    assert trip.traveller == "Ada" and len(trip.stops) == 1
    assert len(chunks) > 5  # streamed in fragments
    parsed = sdk.chat.completions.parse(
        model="sim-model", messages=user("plan it"), response_format=Trip)
    assert isinstance(parsed.choices[0].message.parsed, Trip)


def test_sdk_non_stream_tool_call_and_follow_up(sdk: openai.OpenAI) -> None:
    first = sdk.chat.completions.create(model="sim-model", messages=user("get_weather please"),
                                        tools=[WEATHER])
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and message.content is None
    call = (message.tool_calls or [])[0]
    follow = sdk.chat.completions.create(model="sim-model", tools=[WEATHER],
                                         messages=[*user("get_weather please"),
                                                   message.model_dump(exclude_none=True),
                                                   {"role": "tool", "tool_call_id": call.id,
                                                    "content": "Sunny, 21C"}])
    assert follow.choices[0].message.content == "Tool results: get_weather=Sunny, 21C"


def test_sdk_embeddings(sdk: openai.OpenAI) -> None:
    result = sdk.embeddings.create(model="sim-model", input=[
        "the cat sat on the mat", "the cat sat on a mat", "stock prices fell sharply"])
    vectors = [d.embedding for d in result.data]
    assert [len(v) for v in vectors] == [256] * 3 and result.id.startswith("embd-")

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert all(math.isclose(cos(v, v), 1, rel_tol=1e-6) for v in vectors)
    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2]) + 0.3
    small = sdk.embeddings.create(model="sim-model", input="x", dimensions=8)
    assert len(small.data[0].embedding) == 8  # the SDK decodes base64 by default


# -- failures on the wire ----------------------------------------------------------------------
def test_in_band_error_then_done(sim: SimControl) -> None:
    response = chat_post(sim, "boom [[sim fail=error:3]]", stream=True)
    payloads = data_payloads(response.content)
    assert response.status_code == 200 and payloads[-1] == "[DONE]"
    assert payloads[-2]["error"]["type"] == "InternalServerError"
    tokens = [p["choices"][0]["delta"]["content"] for p in payloads[1:-2]]
    assert tokens == ["You", " said:", " boom"]  # K=3 tokens, then the error
    assert sim.stats()["streams_completed"] == 1


def test_cut_ends_the_body_uncleanly(sim: SimControl) -> None:
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream(
            "POST", sim.url + "/v1/chat/completions", timeout=10,
            json={"model": "sim-model", "stream": True,
                  "messages": user("a b c [[sim fail=cut:2]]")}) as response:
        seen.extend(response.iter_lines())
    assert not any("[DONE]" in line for line in seen)
    assert wait_for(lambda: sim.stats()["streams_cut"] == 1, 2)


@pytest.mark.parametrize("status", [400, 404, 422, 500, 503])
def test_http_failures_use_vllms_error_body(sim: SimControl, status: int) -> None:
    response = chat_post(sim, f"x [[sim fail=http:{status}]]", stream=True)
    assert response.status_code == status
    error = response.json()["error"]
    assert list(error) == ["message", "type", "param", "code"] and error["code"] == status
    expected = {400: "BadRequestError", 404: "NotFoundError", 422: "Unprocessable Entity",
                500: "InternalServerError", 503: "Service Unavailable"}
    assert error["type"] == expected[status]


def test_request_errors(sim: SimControl) -> None:
    unknown = httpx.post(sim.url + "/v1/chat/completions", timeout=5,
                         json={"model": "nope", "messages": user("x")})
    # vLLM 0.32's words (the generic model's default shapes): the served names listed, the
    # refused field named in `param` and in the message's trailer
    assert unknown.status_code == 404 and unknown.json() == {"error": {
        "message": "The model `nope` does not exist. Valid aliases: sim-model, sim-reasoner.",
        "type": "NotFoundError", "param": "model", "code": 404}}
    too_long = chat_post(sim, "x", max_tokens=10**6)
    assert too_long.status_code == 400
    assert too_long.json()["error"] == {
        "message": "max_tokens=1000000 cannot be greater than max_model_len=32768. Please "
                   "request fewer output tokens. (parameter=max_tokens, value=1000000)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}
    for raw in (b"{", b"[]", b'{"model": "sim-model"}'):
        response = httpx.post(sim.url + "/v1/chat/completions", content=raw, timeout=5)
        assert response.status_code == 400 and response.json()["error"]["code"] == 400
    assert chat_post(sim, "x", stream_options={"include_usage": True}).status_code == 400
    assert httpx.get(sim.url + "/v1/chat/completions", timeout=5).status_code == 405
    assert httpx.get(sim.url + "/nowhere", timeout=5).status_code == 404


# -- counters ----------------------------------------------------------------------------------
@pytest.mark.parametrize("directive", ["[[sim tokens=500 delay_ms=20]]", "[[sim fail=stall:2]]"])
def test_disconnect_is_counted_as_abort_within_a_second(sim: SimControl, directive: str) -> None:
    with httpx.stream("POST", sim.url + "/v1/chat/completions", timeout=10,
                      json={"model": "sim-model", "stream": True,
                            "messages": user(f"go {directive}")}) as response:
        for n, _ in enumerate(response.iter_lines()):
            if n == 2:
                assert sim.stats()["active_streams"] == 1
            if n >= 3:
                break  # closes the connection (httpx drops an unfinished response)
    left = time.monotonic()
    assert wait_for(lambda: sim.stats()["streams_aborted"] == 1, 1.0), sim.stats()
    assert time.monotonic() - left < 1.0
    stats = sim.stats()
    assert (stats["active_streams"], stats["streams_completed"]) == (0, 0)


def test_non_stream_disconnect_is_counted(sim: SimControl) -> None:
    impatient = httpx.Timeout(5, read=0.2)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.url + "/v1/chat/completions", timeout=impatient,
                   json={"model": "sim-model", "messages": user("[[sim ttft_ms=5000]]")})
    assert wait_for(lambda: sim.stats()["completions_aborted"] == 1, 1.0)


def test_stats_record_requests_prompts_and_headers(sim: SimControl) -> None:
    for text in ("job-1 [[sim tokens=2]]", "job-2", "job-1"):
        chat_post(sim, text, stream=True).raise_for_status()
    httpx.post(sim.url + "/v1/chat/completions", timeout=5, json={"model": "sim-model"},
               headers={"authorization": "Bearer k", "X-Trace": "t1"})
    stats = sim.stats()
    assert stats["prompt_counts"] == {"job-1": 2, "job-2": 1}
    assert (stats["chat_requests"], stats["streams_started"], stats["streams_completed"]) == \
        (4, 3, 3)
    assert stats["by_path"]["/v1/chat/completions"] == 4
    assert stats["last_request"] == {"model": "sim-model"}
    assert stats["last_headers"]["authorization"] == "Bearer k"
    assert stats["last_headers"]["x-trace"] == "t1"
    sim.reset()
    after = sim.stats()
    assert (after["requests"], after["prompt_counts"], after["last_request"]) == (0, {}, None)


def test_concurrent_streams_are_counted_and_paced(sim: SimControl) -> None:
    async def one(http: httpx.AsyncClient, i: int) -> str:
        body = {"model": "sim-model", "stream": True,
                "messages": user(f"stream {i} [[sim tokens=20 delay_ms=20]]")}
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            return "".join([line async for line in response.aiter_lines()])

    async def run() -> list[str]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=20) as http:
            return await asyncio.gather(*(one(http, i) for i in range(32)))

    started = time.monotonic()
    bodies = asyncio.run(run())
    elapsed = time.monotonic() - started
    assert all(b.endswith("data: [DONE]") for b in bodies)
    assert 0.38 <= elapsed < 5  # 20 tokens at 20 ms each, all 32 side by side
    stats = sim.stats()
    assert stats["max_concurrent_streams"] > 1 and stats["streams_completed"] == 32


def test_ttft_and_delay_are_paced(sim: SimControl) -> None:
    started = time.monotonic()
    arrivals = []
    with httpx.stream("POST", sim.url + "/v1/chat/completions", timeout=10,
                      json={"model": "sim-model", "stream": True,
                            "messages": user("x [[sim tokens=20 delay_ms=20 ttft_ms=200]]")},
                      ) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                arrivals.append(time.monotonic() - started)
    assert arrivals[0] >= 0.19  # the first token waits for ttft
    assert arrivals[-1] - arrivals[0] >= 0.36  # then 19 more gaps of 20 ms


# -- server flags ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flagged() -> Iterator[ServerProcess]:
    server = start_simulator("--model", "alpha", "--model", "beta-reasoner",
                             "--reasoning-field", "both", "--max-model-len", "500")
    yield server
    server.stop()


def test_flags_set_models_reasoning_field_and_context(flagged: ServerProcess) -> None:
    models = httpx.get(flagged.url + "/v1/models", timeout=5).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [("alpha", 500),
                                                              ("beta-reasoner", 500)]
    body = {"model": "beta-reasoner", "stream": True, "messages": user("hi")}
    payloads = data_payloads(httpx.post(flagged.url + "/v1/chat/completions", json=body,
                                        timeout=10).content)
    assert payloads[1]["choices"][0]["delta"] == {"reasoning": "Let", "reasoning_content": "Let"}
    whole = httpx.post(flagged.url + "/v1/chat/completions", timeout=10,
                       json={**body, "stream": False}).json()["choices"][0]["message"]
    assert whole["reasoning"] == whole["reasoning_content"] != None  # noqa: E711
    assert httpx.post(flagged.url + "/v1/chat/completions", timeout=10,
                      json={"model": "sim-model", "messages": user("x")}).status_code == 404
    # vLLM 0.32 takes a prompt + max_tokens past the context (the answer stops at it), not
    # max_tokens alone past it
    fits = httpx.post(flagged.url + "/v1/chat/completions", timeout=10,
                      json={**body, "stream": False, "max_tokens": 499}).json()
    assert fits["usage"]["total_tokens"] <= 500
    assert httpx.post(flagged.url + "/v1/chat/completions", timeout=10,
                      json={**body, "max_tokens": 501}).status_code == 400
