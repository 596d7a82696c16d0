"""Every failure leaves in OpenAI's error shape with the right status, and the proxy keeps
serving afterwards (the in-process app, the simulator as its upstream over real HTTP)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings, Timeouts
from tests.conftest import SimControl
from tests.support.servers import free_port, start_simulator

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}


def assert_openai_error(response: httpx.Response, status: int, *, code: str | None = None,
                        param: str | None = None) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return dict(error)


async def still_serving(client: httpx.AsyncClient) -> None:
    ok = await client.post("/v1/chat/completions", json=CHAT)
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["message"]["content"] == "You said: hi"


async def proxy_for(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http


async def test_unknown_route_is_404(asgi_client: httpx.AsyncClient) -> None:
    assert_openai_error(await asgi_client.get("/v1/nothing-here"), 404)
    assert_openai_error(await asgi_client.get("/elsewhere"), 404)
    await still_serving(asgi_client)


async def test_wrong_method_is_405(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.get("/v1/chat/completions")
    assert_openai_error(response, 405)
    assert "POST" in response.headers["allow"]
    await still_serving(asgi_client)


@pytest.mark.parametrize("body", [b"{", b"not json", b"", b'{"model": "sim-model",}'])
async def test_malformed_json_is_400(asgi_client: httpx.AsyncClient, body: bytes) -> None:
    response = await asgi_client.post("/v1/chat/completions", content=body,
                                 headers={"content-type": "application/json"})
    assert_openai_error(response, 400)
    await still_serving(asgi_client)


@pytest.mark.parametrize(("body", "param"), [(b"[1, 2]", None), (b'{"messages": []}', "model"),
                                              (b'{"model": 7}', "model")])
async def test_wrong_shape_is_400_naming_the_field(asgi_client: httpx.AsyncClient, body: bytes,
                                                   param: str | None) -> None:
    response = await asgi_client.post("/v1/chat/completions", content=body,
                                 headers={"content-type": "application/json"})
    assert_openai_error(response, 400, param=param)


async def test_unknown_model_is_404_model_not_found(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v1/chat/completions", json={**CHAT, "model": "no-such"})
    assert_openai_error(response, 404, code="model_not_found", param="model")
    await still_serving(asgi_client)


async def test_body_over_the_limit_is_413(simulator: object, settings: Settings) -> None:
    async for client in proxy_for(settings.replace(max_body_bytes=512)):
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
        assert_openai_error(await client.post("/v1/chat/completions", json=big), 413)

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for _ in range(10):
                yield b" " * 100

        assert_openai_error(await client.post("/v1/chat/completions", content=chunked(),
                                              headers={"content-type": "application/json"}),
                            413)
        await still_serving(client)


async def test_api_keys_are_required_when_configured(settings: Settings) -> None:
    async for client in proxy_for(settings.replace(api_keys=("k1", "k2"))):
        assert_openai_error(await client.post("/v1/chat/completions", json=CHAT), 401,
                            code="invalid_api_key")
        wrong = {"authorization": "Bearer k3"}
        assert_openai_error(await client.post("/v1/chat/completions", json=CHAT, headers=wrong),
                            401, code="invalid_api_key")
        assert_openai_error(await client.get("/v1/models", headers={"authorization": "Basic k1"}),
                            401)
        for key in ("k1", "k2"):
            ok = await client.get("/v1/models", headers={"authorization": f"Bearer {key}"})
            assert ok.status_code == 200
        assert (await client.get("/healthz")).status_code == 200


async def test_client_key_never_reaches_the_upstream(settings: Settings, sim: SimControl) -> None:
    async for client in proxy_for(settings.replace(api_keys=("client-secret",))):
        headers = {"authorization": "Bearer client-secret"}
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=headers)).is_success
        assert "authorization" not in sim.stats()["last_headers"]
    async for client in proxy_for(settings.replace(api_keys=("client-secret",),
                                                   upstream_api_key="fleet-key")):
        headers = {"authorization": "Bearer client-secret"}
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=headers)).is_success
        assert sim.stats()["last_headers"]["authorization"] == "Bearer fleet-key"


async def test_refused_upstream_is_502(settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async for client in proxy_for(settings.replace(upstreams=(dead,))):
        assert_openai_error(await client.post("/v1/chat/completions", json=CHAT), 502)
        assert_openai_error(
            await client.post("/v1/chat/completions", json={**CHAT, "stream": True}), 502
        )
        assert (await client.get("/healthz")).status_code == 200
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["reasons"]


async def test_unreachable_replica_is_skipped_for_a_live_one(settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async for client in proxy_for(settings.replace(upstreams=(dead, *settings.fleet.upstreams))):
        for _ in range(3):
            await still_serving(client)


async def test_upstream_timeout_is_504(settings: Settings) -> None:
    quick = settings.replace(timeouts=Timeouts(connect=2, first_byte=0.3, idle=0.3))
    async for client in proxy_for(quick):
        slow = {**CHAT, "messages": [{"role": "user", "content": "[[sim tokens=20 delay_ms=100]]"}]}
        assert_openai_error(await client.post("/v1/chat/completions", json=slow), 504)
        await still_serving(client)


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_upstream_4xx_keeps_its_status_and_message(asgi_client: httpx.AsyncClient,
                                                         status: int) -> None:
    bad = {**CHAT, "messages": [{"role": "user", "content": f"[[sim fail=http:{status}]]"}]}
    error = assert_openai_error(await asgi_client.post("/v1/chat/completions", json=bad),
                                400 if status == 422 else status)
    assert error["type"] == "invalid_request_error"
    await still_serving(asgi_client)


async def test_context_too_long_is_400_with_the_upstream_message(
    asgi_client: httpx.AsyncClient,
) -> None:
    # pass-through: vLLM 0.32's own words and names (they are the chat client's), but a
    # max_tokens above the context is not called a context overflow
    response = await asgi_client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 10**7})
    error = assert_openai_error(response, 400, param="max_tokens")
    assert "cannot be greater than max_model_len" in str(error["message"])
    assert error["code"] is None
    long = {**CHAT, "messages": [{"role": "user", "content": "word " * 40_000}]}
    error = assert_openai_error(await asgi_client.post("/v1/chat/completions", json=long), 400,
                                code="context_length_exceeded", param="input_tokens")
    assert "maximum context length" in str(error["message"])


@pytest.mark.parametrize("stream", [False, True])
async def test_fleet_400s_name_the_field_the_responses_client_sent(
        asgi_client: httpx.AsyncClient, stream: bool) -> None:
    # vLLM 0.32 says max_tokens / input_tokens with a (parameter=X, value=Y) trailer; the
    # Responses client sent max_output_tokens / input (core/translate/fleet_errors.py)
    big = {**CREATE, "max_output_tokens": 10**7, "stream": stream}
    error = assert_openai_error(await asgi_client.post("/v1/responses", json=big), 400,
                                code="integer_above_max_value", param="max_output_tokens")
    assert str(error["message"]).startswith("max_output_tokens=10000000 cannot be greater")
    assert "parameter=" not in str(error["message"])
    long = {**CREATE, "input": "word " * 40_000, "stream": stream}
    error = assert_openai_error(await asgi_client.post("/v1/responses", json=long), 400,
                                code="context_length_exceeded", param="input")
    assert "parameter=" not in str(error["message"])


async def test_upstream_5xx_is_502(asgi_client: httpx.AsyncClient) -> None:
    bad = {**CHAT, "messages": [{"role": "user", "content": "[[sim fail=http:500]]"}]}
    assert_openai_error(await asgi_client.post("/v1/chat/completions", json=bad), 502)
    await still_serving(asgi_client)


CREATE = {"model": "sim-model", "input": "hi"}
JSON_ROUTES = [("/v1/responses", CREATE), ("/v1/responses/input_tokens", CREATE),
               ("/v1/responses/compact", CREATE), ("/v1/chat/completions", CHAT),
               ("/v1/conversations", {})]


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x", None])
@pytest.mark.parametrize(("path", "body"), JSON_ROUTES, ids=[p for p, _ in JSON_ROUTES])
async def test_with_auth_off_a_body_not_declared_json_is_415(
        asgi_client: httpx.AsyncClient, sim: SimControl, path: str, body: dict[str, object],
        kind: str | None) -> None:
    """What a page on another site can make a browser send without a CORS preflight (or, with
    no type, a Blob body) is refused before anything runs."""
    headers = {} if kind is None else {"content-type": kind}
    response = await asgi_client.post(path, content=json.dumps(body), headers=headers)
    error = assert_openai_error(response, 415, code="unsupported_media_type")
    assert "application/json" in str(error["message"])
    assert sim.stats()["chat_requests"] == 0
    await still_serving(asgi_client)


async def test_with_auth_off_json_types_and_bodiless_posts_are_served(
        asgi_client: httpx.AsyncClient) -> None:
    for kind in ("application/json; charset=utf-8", "application/vnd.api+json"):
        response = await asgi_client.post("/v1/responses", content=json.dumps(CREATE),
                                     headers={"content-type": kind})
        assert response.status_code == 200, response.text
    cancel = await asgi_client.post("/v1/responses/resp_0123/cancel")  # no body, no type
    assert_openai_error(cancel, 404)


async def test_with_auth_on_the_type_is_not_required(simulator: object,
                                                     settings: Settings) -> None:
    """A browser cannot send the key cross-origin without a preflight: nothing to guard."""
    async for client in proxy_for(settings.replace(api_keys=("sk-one",))):
        response = await client.post("/v1/responses", content=json.dumps(CREATE),
                                     headers={"content-type": "text/plain",
                                              "authorization": "Bearer sk-one"})
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
async def test_an_output_for_a_call_nobody_made_is_400_naming_its_call_id(
        asgi_client: httpx.AsyncClient, sim: SimControl, kind: str) -> None:
    """OpenAI's answer; sent upstream it would be a tool message no call asked for."""
    first = await asgi_client.post("/v1/responses", json={**CREATE, "store": True})
    assert first.status_code == 200
    before = sim.stats()["chat_requests"]
    answer = await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "previous_response_id": first.json()["id"],
        "input": [{"type": "message", "role": "user", "content": "and"},
                  {"type": kind, "call_id": "call_nowhere", "output": "x"}]})
    error = assert_openai_error(answer, 400)
    assert error["type"] == "invalid_request_error" and error["param"] == "input[1].call_id"
    assert "call_nowhere" in str(error["message"])
    assert sim.stats()["chat_requests"] == before  # nothing went upstream


async def test_auto_tool_choice_on_a_replica_without_the_flag_names_the_flag() -> None:
    """vLLM's own 400 (the simulator started as vLLM without --enable-auto-tool-choice) becomes
    one an operator can act on; requests without auto tool choice are still served."""
    simulator = start_simulator("--no-auto-tool-choice")
    try:
        async for client in proxy_for(Settings.of(upstreams=(simulator.url,))):
            tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
            for _ in range(2):  # learned, then remembered for the replica
                answer = await client.post("/v1/responses", json={
                    **CREATE, "tools": [tool], "tool_choice": "auto"})
                error = assert_openai_error(answer, 400, code="auto_tool_choice_unavailable",
                                            param="tool_choice")
                assert "--enable-auto-tool-choice" in str(error["message"])
            named = await client.post("/v1/responses", json={
                **CREATE, "tools": [tool], "tool_choice": "required"})
            assert named.status_code == 200, named.text
    finally:
        simulator.stop()
