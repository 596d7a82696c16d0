"""The response cache in-process (embedded store, the simulator upstream): exact keys on both
routes, one entry for JSON and SSE clients, what is never kept, Cache-Control, expiry."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.app import create_app
from proxy.core.cache.key import ROUTE_CHAT, USE_CACHE, cache_key, chat_material
from proxy.core.errors import StoreUnavailable
from proxy.runtime import Runtime
from proxy.settings import Settings
from tests.conftest import SimControl
from tests.support.conformance import check_stream
from tests.support.prom import parse
from tests.support.sse import data_payloads

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
CHAT_WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}

Client = tuple[httpx.AsyncClient, Runtime]


@pytest.fixture
def settings(simulator: Any) -> Settings:
    return Settings.of(upstreams=(simulator.url,), cache_mode="exact")


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[Client]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http, app.state.runtime


async def settle(runtime: Runtime) -> None:
    """Wait (bounded) for the cache writes spawned after the answers."""
    for _ in range(200):
        if not len(runtime.process.tasks):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("cache writes did not finish")


async def post(client: Client, path: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> httpx.Response:
    http, runtime = client
    reply = await http.post(path, json=body, headers=headers or {})
    assert reply.status_code == 200, reply.text
    await settle(runtime)
    return reply


def text_of(reply: httpx.Response) -> str:
    """The answer's text, from a JSON or SSE Responses reply (the stream checked first)."""
    if reply.headers["content-type"].startswith("text/event-stream"):
        events = data_payloads(reply.text)
        check_stream(events)
        final = events[-1]["response"]
    else:
        final = reply.json()
    return str(final["output"][-1]["content"][0]["text"])


def chat_text(reply: httpx.Response) -> str:
    if reply.headers["content-type"].startswith("text/event-stream"):
        payloads = data_payloads(reply.text)
        assert payloads[-1] == "[DONE]"
        chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
        with_choices = [c for c in chunks if c.choices]
        assert with_choices[-1].choices[0].finish_reason == "stop"
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    completion = ChatCompletion.model_validate(reply.json())
    assert completion.choices[0].finish_reason == "stop"
    return completion.choices[0].message.content or ""


def chat_calls(sim: SimControl) -> int:
    return int(sim.stats()["chat_requests"])


@pytest.mark.parametrize(("first", "second"), [(False, False), (True, True), (False, True),
                                               (True, False)],
                         ids=["json-json", "sse-sse", "json-sse", "sse-json"])
async def test_responses_same_request_twice_is_a_hit(app_client: Client, sim: SimControl,
                                                     first: bool, second: bool) -> None:
    body = {"model": "sim-model", "input": f"cache me {first} {second}", "store": False}
    miss = await post(app_client, "/v1/responses", {**body, "stream": first})
    assert miss.headers["x-proxy-cache"] == "miss"
    calls = chat_calls(sim)
    hit = await post(app_client, "/v1/responses", {**body, "stream": second})
    assert hit.headers["x-proxy-cache"] == "hit"
    assert text_of(hit) == text_of(miss) == f"You said: cache me {first} {second}"
    assert chat_calls(sim) == calls


@pytest.mark.parametrize(("first", "second"), [(False, False), (True, True), (False, True),
                                               (True, False)],
                         ids=["json-json", "sse-sse", "json-sse", "sse-json"])
async def test_chat_same_request_twice_is_a_hit(app_client: Client, sim: SimControl,
                                                first: bool, second: bool) -> None:
    body: dict[str, Any] = {"model": "sim-model", "messages": [
        {"role": "user", "content": f"chat cache {first} {second}"}]}
    options = {"stream_options": {"include_usage": True}}
    miss = await post(app_client, "/v1/chat/completions",
                      {**body, "stream": first, **(options if first else {})})
    assert miss.headers["x-proxy-cache"] == "miss"
    calls = chat_calls(sim)
    hit = await post(app_client, "/v1/chat/completions",
                     {**body, "stream": second, **(options if second else {})})
    assert hit.headers["x-proxy-cache"] == "hit"
    assert chat_text(hit) == chat_text(miss) == f"You said: chat cache {first} {second}"
    assert chat_calls(sim) == calls
    if second:
        usage = [p for p in data_payloads(hit.text)[:-1] if not p["choices"]]
        assert usage and usage[0]["usage"]["completion_tokens"] > 0


async def test_a_stored_hit_is_a_new_response_that_chains(app_client: Client,
                                                          sim: SimControl) -> None:
    http, _ = app_client
    body = {"model": "sim-model", "input": "remember the number 42"}
    original = (await post(app_client, "/v1/responses", body)).json()
    hit = await post(app_client, "/v1/responses", body)
    assert hit.headers["x-proxy-cache"] == "hit"
    copy = hit.json()
    assert copy["id"] != original["id"]
    assert copy["output"][0]["id"] != original["output"][0]["id"]
    stored = (await http.get(f"/v1/responses/{copy['id']}")).json()
    assert stored["output"] == copy["output"] and stored["status"] == "completed"
    replay = await http.get(f"/v1/responses/{copy['id']}?stream=true")
    check_stream(data_payloads(replay.text))
    # The next turn continues the hit: its history is the original's, so the turn made on the
    # original is the same request, and a hit too.
    turn = {"model": "sim-model", "input": "and then?"}
    after_original = await post(app_client, "/v1/responses",
                                {**turn, "previous_response_id": original["id"]})
    assert after_original.headers["x-proxy-cache"] == "miss"
    calls = chat_calls(sim)
    after_hit = await post(app_client, "/v1/responses",
                           {**turn, "previous_response_id": copy["id"]})
    assert after_hit.headers["x-proxy-cache"] == "hit"
    assert after_hit.json()["previous_response_id"] == copy["id"]
    assert chat_calls(sim) == calls
    # And a new question on the hit goes upstream with the whole history.
    await post(app_client, "/v1/responses", {"model": "sim-model", "input": "what number?",
                                             "previous_response_id": copy["id"]})
    sent = sim.stats()["last_request"]["messages"]
    assert [m["content"] for m in sent] == [
        "remember the number 42", "You said: remember the number 42", "what number?"]


BASE: dict[str, Any] = {"model": "sim-model", "input": "vary me", "store": False}


@pytest.mark.parametrize("change", [
    {"tools": [WEATHER]},
    {"text": {"format": {"type": "json_object"}}},
    {"temperature": 0.3},
    {"instructions": "be brief"},
    {"input": [{"role": "user", "content": "earlier turn"},
               {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "vary me"}]},
], ids=["tools", "text.format", "temperature", "instructions", "earlier-turn"])
async def test_responses_misses_when_what_shapes_the_answer_differs(
        app_client: Client, change: dict[str, Any]) -> None:
    await post(app_client, "/v1/responses", BASE)
    assert (await post(app_client, "/v1/responses", BASE)).headers["x-proxy-cache"] == "hit"
    other = await post(app_client, "/v1/responses", {**BASE, **change})
    assert other.headers["x-proxy-cache"] == "miss"


@pytest.mark.parametrize("change", [
    {"tools": [CHAT_WEATHER], "tool_choice": "none"},
    {"response_format": {"type": "json_object"}},
    {"temperature": 0.3},
    {"messages": [{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "vary chat"}]},
], ids=["tools", "response_format", "temperature", "earlier-turn"])
async def test_chat_misses_when_what_shapes_the_answer_differs(
        app_client: Client, change: dict[str, Any]) -> None:
    base = {"model": "sim-model", "messages": [{"role": "user", "content": "vary chat"}]}
    await post(app_client, "/v1/chat/completions", base)
    assert (await post(app_client, "/v1/chat/completions", base)).headers[
        "x-proxy-cache"] == "hit"
    other = await post(app_client, "/v1/chat/completions", {**base, **change})
    assert other.headers["x-proxy-cache"] == "miss"


async def test_another_api_key_never_sees_the_entry(app_client: Client) -> None:
    body = {"model": "sim-model", "input": "private answer", "store": False}
    chat = {"model": "sim-model", "messages": [{"role": "user", "content": "private chat"}]}
    for path, payload in (("/v1/responses", body), ("/v1/chat/completions", chat)):
        alice = {"authorization": "Bearer sk-alice"}
        await post(app_client, path, payload, alice)
        assert (await post(app_client, path, payload, alice)).headers["x-proxy-cache"] == "hit"
        bob = await post(app_client, path, payload, {"authorization": "Bearer sk-bob"})
        assert bob.headers["x-proxy-cache"] == "miss"


async def test_no_cache_bypasses_the_lookup_and_no_store_skips_the_write(
        app_client: Client, sim: SimControl) -> None:
    for path, body in (
            ("/v1/responses", {"model": "sim-model", "input": "directives", "store": False}),
            ("/v1/chat/completions",
             {"model": "sim-model", "messages": [{"role": "user", "content": "directives"}]})):
        unstored = await post(app_client, path, body, {"cache-control": "no-store"})
        assert unstored.headers["x-proxy-cache"] == "miss"
        assert (await post(app_client, path, body)).headers["x-proxy-cache"] == "miss"
        calls = chat_calls(sim)
        bypass = await post(app_client, path, body, {"cache-control": "no-cache"})
        assert bypass.headers["x-proxy-cache"] == "bypass"
        assert chat_calls(sim) == calls + 1
        assert (await post(app_client, path, body)).headers["x-proxy-cache"] == "hit"


@pytest.mark.parametrize("body", [
    {"input": "call get_weather please", "tools": [WEATHER]},
    {"input": "cut short [[sim finish=length]]"},
    {"input": "failing [[sim fail=error:2]]", "stream": True},
], ids=["tool-call", "incomplete", "failed"])
async def test_responses_that_are_not_completed_text_are_never_kept(
        app_client: Client, sim: SimControl, body: dict[str, Any]) -> None:
    request = {"model": "sim-model", "store": False, **body}
    for _ in range(2):
        reply = await post(app_client, "/v1/responses", request)
        assert reply.headers["x-proxy-cache"] == "miss"
    assert sim.stats()["chat_requests"] == 2


async def test_a_chat_tool_call_is_never_kept(app_client: Client, sim: SimControl) -> None:
    body = {"model": "sim-model", "tools": [CHAT_WEATHER],
            "messages": [{"role": "user", "content": "call get_weather"}]}
    for stream in (False, True, False):
        reply = await post(app_client, "/v1/chat/completions", {**body, "stream": stream})
        assert reply.headers["x-proxy-cache"] == "miss"
    assert sim.stats()["chat_requests"] == 3


async def test_background_requests_bypass_the_cache(app_client: Client) -> None:
    body = {"model": "sim-model", "input": "in the background", "background": True}
    reply = await post(app_client, "/v1/responses", body)
    assert reply.headers["x-proxy-cache"] == "bypass"


async def test_logprobs_requests_bypass_the_cache(app_client: Client) -> None:
    # logprobs measure one sampling: never kept, never served (as the chat cache holds)
    body = {"model": "sim-model", "input": "with logprobs", "top_logprobs": 2,
            "include": ["message.output_text.logprobs"]}
    for _ in range(2):
        reply = await post(app_client, "/v1/responses", body)
        assert reply.headers["x-proxy-cache"] == "bypass"
        assert reply.json()["output"][0]["content"][0]["logprobs"]


async def test_a_stream_the_client_left_is_not_kept(app_client: Client,
                                                    sim: SimControl) -> None:
    _, runtime = app_client
    body = {"model": "sim-model", "input": "leave early [[sim tokens=50 delay_ms=5]]",
            "stream": True, "store": False}
    outcome = await runtime.services.responses.create("public", body, USE_CACHE)
    assert outcome.stream is not None and outcome.headers["x-proxy-cache"] == "miss"
    async for _ in outcome.stream:
        break
    await outcome.stream.aclose()  # type: ignore[attr-defined]
    await settle(runtime)
    assert runtime.metrics.value("proxy_cache_writes_total", route="responses") == 0
    again = await post(app_client, "/v1/responses", {**body, "stream": False})
    assert again.headers["x-proxy-cache"] == "miss"


async def test_a_chat_stream_the_client_left_is_not_kept(app_client: Client) -> None:
    _, runtime = app_client
    assert runtime.services.chat is not None
    body = b'{"model": "sim-model", "stream": true, "messages": [{"role": "user", ' \
           b'"content": "leave [[sim tokens=50 delay_ms=5]]"}]}'
    relay = await runtime.services.chat.chat_completions(orjson.loads(body), "public",
                                                         USE_CACHE, size=len(body))
    assert relay.stream is not None
    async for _ in relay.stream:
        break
    await relay.stream.aclose()  # type: ignore[attr-defined]
    await settle(runtime)
    assert runtime.metrics.value("proxy_cache_writes_total", route="chat") == 0


@pytest.fixture
def short_ttl(simulator: Any) -> Settings:
    return Settings.of(upstreams=(simulator.url,), cache_mode="exact", cache_ttl=1)


async def test_entries_expire_after_the_cache_ttl(short_ttl: Settings) -> None:
    app = create_app(short_ttl)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            client = (http, app.state.runtime)
            body = {"model": "sim-model", "input": "short lived", "store": False}
            await post(client, "/v1/responses", body)
            assert (await post(client, "/v1/responses", body)).headers["x-proxy-cache"] == "hit"
            await asyncio.sleep(1.2)
            assert (await post(client, "/v1/responses", body)).headers[
                "x-proxy-cache"] == "miss"


async def test_metrics_count_hits_misses_bypasses_and_lookup_time(app_client: Client) -> None:
    http, _ = app_client
    body = {"model": "sim-model", "input": "measure me", "store": False}
    await post(app_client, "/v1/responses", body)
    await post(app_client, "/v1/responses", body)
    await post(app_client, "/v1/responses", body, {"cache-control": "no-cache"})
    seen = parse((await http.get("/metrics")).text)
    for result in ("hit", "miss", "bypass"):
        assert seen.value("proxy_cache_requests_total", result=result, route="responses") == 1
    assert seen.value("proxy_cache_hits_total", kind="exact", route="responses") == 1
    assert seen.value("proxy_cache_lookup_seconds_count") == 2  # the bypass looked nothing up
    assert (seen.value("proxy_cache_lookup_seconds_sum") or 0) > 0


async def test_cache_off_adds_no_header(simulator: Any) -> None:
    app = create_app(Settings.of(upstreams=(simulator.url,)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            for path, body in (
                    ("/v1/responses", {"model": "sim-model", "input": "plain", "store": False}),
                    ("/v1/chat/completions", {"model": "sim-model", "messages": [
                        {"role": "user", "content": "plain"}]})):
                reply = await http.post(path, json=body)
                assert reply.status_code == 200 and "x-proxy-cache" not in reply.headers


async def test_a_chat_stream_kept_without_usage_does_not_serve_one_that_wants_it(
        app_client: Client) -> None:
    body = {"model": "sim-model", "stream": True,
            "messages": [{"role": "user", "content": "usage please"}]}
    await post(app_client, "/v1/chat/completions", body)  # kept, without usage
    plain = await post(app_client, "/v1/chat/completions", body)
    assert plain.headers["x-proxy-cache"] == "hit"
    wanting = await post(app_client, "/v1/chat/completions",
                         {**body, "stream_options": {"include_usage": True}})
    assert wanting.headers["x-proxy-cache"] == "miss"
    assert next(p for p in data_payloads(wanting.text)[:-1] if not p["choices"])["usage"]


async def test_a_store_failure_is_a_miss_never_an_error(app_client: Client,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _, runtime = app_client
    cache = runtime.services.responses._cache
    assert cache is not None

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("The store is unavailable (ConnectionError).")

    monkeypatch.setattr(cache._store, "get", down)
    monkeypatch.setattr(cache._store, "put", down)
    body = {"model": "sim-model", "input": "redis is down", "store": False}
    for _ in range(2):
        reply = await post(app_client, "/v1/responses", body)
        assert reply.headers["x-proxy-cache"] == "miss"
        assert text_of(reply) == "You said: redis is down"


async def test_a_planted_tool_call_entry_is_never_served(app_client: Client) -> None:
    """The read side checks too: an entry holding a tool call (planted here, as an older
    version or another writer might have left it) is a miss."""
    _, runtime = app_client
    cache = runtime.services.responses._cache
    assert cache is not None
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "planted"}]}
    exact = cache_key("public", ROUTE_CHAT, chat_material(body)).exact
    called = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "sim-model",
              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                  "role": "assistant", "content": None, "tool_calls": [{
                      "id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{}"}}]}}]}
    entry = orjson.dumps({"route": ROUTE_CHAT, "body": called})
    await cache._store.put("public", exact, entry, ttl=60, now=0.0)
    reply = await post(app_client, "/v1/chat/completions", body)
    assert reply.headers["x-proxy-cache"] == "miss"
    assert reply.json()["choices"][0]["message"]["content"] == "You said: planted"


async def test_a_hit_in_a_conversation_adds_the_turn_to_it(app_client: Client,
                                                           sim: SimControl) -> None:
    http, _ = app_client
    first = (await http.post("/v1/conversations", json={})).json()["id"]
    second = (await http.post("/v1/conversations", json={})).json()["id"]
    body = {"model": "sim-model", "input": "a conversation opener"}
    await post(app_client, "/v1/responses", {**body, "conversation": first})
    calls = chat_calls(sim)
    hit = await post(app_client, "/v1/responses", {**body, "conversation": second})
    assert hit.headers["x-proxy-cache"] == "hit"
    assert chat_calls(sim) == calls
    items = (await http.get(f"/v1/conversations/{second}/items?order=asc")).json()["data"]
    assert [item["role"] for item in items] == ["user", "assistant"]
    assert items[1]["content"][0]["text"] == "You said: a conversation opener"
    # the next turn of each conversation has the same history: a hit again
    follow = {"model": "sim-model", "input": "go on"}
    await post(app_client, "/v1/responses", {**follow, "conversation": first})
    again = await post(app_client, "/v1/responses", {**follow, "conversation": second})
    assert again.headers["x-proxy-cache"] == "hit"


@pytest.mark.parametrize(("raw", "param"), [
    (b'{"model": "sim-model", "messages": ', None),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
], ids=["bad-json", "no-model"])
async def test_bad_chat_bodies_are_openai_errors_with_the_cache_on(
        app_client: Client, raw: bytes, param: str | None) -> None:
    http, _ = app_client
    reply = await http.post("/v1/chat/completions", content=raw,
                            headers={"content-type": "application/json"})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


# -- a large body (cost bounds): parsed once, and off the event loop ---------------------------
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_a_large_body_is_parsed_once_and_off_the_loop(
        app_client: Client, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The chat route parsed its body three times on the loop (the stream check, the cache,
    the pass-through); each route now parses once, in a worker thread when over 1 MiB."""
    http, _ = app_client
    text = "[[sim tokens=2]] " + "\u201c" * (600 * 1024)  # 1.8 MB of body
    body = ({"model": "sim-model", "messages": [{"role": "user", "content": text}]}
            if path.endswith("completions") else {"model": "sim-model", "input": text})
    raw = orjson.dumps(body)
    loop_thread = threading.get_ident()
    parsed_in: list[int] = []
    loads = orjson.loads

    def counting(data: Any) -> Any:
        if len(data) == len(raw):
            parsed_in.append(threading.get_ident())
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting)
    reply = await http.post(path, content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 200, reply.text
    assert len(parsed_in) == 1, f"the body was parsed {len(parsed_in)} times"
    assert parsed_in[0] != loop_thread, "the body was parsed on the event loop"
