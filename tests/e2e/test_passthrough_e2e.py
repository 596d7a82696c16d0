"""Chat pass-through over real sockets: the proxy's chunks equal the simulator's own, through
curl, httpx and the openai SDK; a client that goes away aborts the upstream within a second."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads, mask

pytestmark = pytest.mark.e2e


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


def stream_bytes(url: str, body: dict[str, Any]) -> bytes:
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return b"".join(response.iter_raw())


@pytest.mark.parametrize(
    "body",
    [
        chat_body("hello there [[sim tokens=12]]", stream=True),
        chat_body("hello", stream=True, stream_options={"include_usage": True}),
        {**chat_body("think first", stream=True), "model": "sim-reasoner"},
        chat_body(
            "please call get_weather",
            stream=True,
            tools=[{"type": "function", "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}],
        ),
        chat_body("cut short", stream=True, max_tokens=2),
        chat_body("boom [[sim fail=error:3]]", stream=True),
    ],
    ids=["text", "usage", "reasoning", "tool-call", "length", "in-band-error"],
)
def test_stream_chunks_equal_the_upstream(simulator: ServerProcess, proxy: ServerProcess,
                                          body: dict[str, Any]) -> None:
    direct = data_payloads(stream_bytes(simulator.url, body))
    proxied = data_payloads(stream_bytes(proxy.url, body))
    assert direct[-1] == "[DONE]"
    assert mask(proxied) == mask(direct)


def test_non_stream_equals_the_upstream(simulator: ServerProcess, proxy: ServerProcess) -> None:
    body = chat_body("plain [[sim tokens=7]]")
    direct = httpx.post(simulator.url + "/v1/chat/completions", json=body, timeout=30)
    proxied = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert proxied.status_code == direct.status_code == 200
    assert mask(proxied.json()) == mask(direct.json())


def test_models_equal_the_upstream(simulator: ServerProcess, proxy: ServerProcess) -> None:
    direct = httpx.get(simulator.url + "/v1/models", timeout=10).json()
    proxied = httpx.get(proxy.url + "/v1/models", timeout=10).json()
    assert proxied == direct


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_sees_the_same_chunks(simulator: ServerProcess, proxy: ServerProcess) -> None:
    payload = '{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"curl?"}]}'

    def curl(url: str) -> bytes:
        return subprocess.run(
            ["curl", "-sN", "--max-time", "20", url + "/v1/chat/completions",
             "-H", "content-type: application/json", "-d", payload],
            capture_output=True, check=True, timeout=30,
        ).stdout

    assert mask(data_payloads(curl(proxy.url))) == mask(data_payloads(curl(simulator.url)))


@pytest.mark.parametrize("stream", [True, False])
def test_openai_sdk_sees_the_same_completion(simulator: ServerProcess, proxy: ServerProcess,
                                             stream: bool) -> None:
    def run(url: str) -> Any:
        with openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
            result = client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "sdk says hi"}],
                stream=stream, stream_options={"include_usage": True} if stream else None,
            )
            if stream:
                return [chunk.model_dump() for chunk in result]
            return result.model_dump()

    direct, proxied = run(simulator.url), run(proxy.url)
    assert mask(proxied) == mask(direct)
    if stream:
        text = "".join(c["choices"][0]["delta"]["content"] or "" for c in proxied if c["choices"])
        assert text == "You said: sdk says hi"


@pytest.mark.parametrize("directive", ["[[sim tokens=2000 delay_ms=20]]", "[[sim fail=stall:3]]"])
def test_client_disconnect_aborts_the_upstream_within_a_second(
    proxy: ServerProcess, sim: SimControl, directive: str
) -> None:
    body = chat_body(f"long answer {directive}", stream=True)
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body,
                      timeout=30) as response:
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen += 1
            if seen >= 3:
                break
    closed_at = time.monotonic()
    while time.monotonic() - closed_at < 1.0:
        if sim.stats()["streams_aborted"] >= 1:
            break
        time.sleep(0.02)
    assert sim.stats()["streams_aborted"] == 1, sim.stats()
