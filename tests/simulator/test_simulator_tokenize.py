"""The simulator's `POST /tokenize` (vLLM's TokenizeResponse) counts exactly as its chat usage
counts prompt tokens."""

from __future__ import annotations

import httpx
import pytest

from proxy.simulator.app import create_app
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import SimError
from proxy.simulator.request import parse_chat
from proxy.simulator.tokenize import tokenize

CONFIG = SimConfig(max_model_len=4096)
MESSAGES = [
    {"role": "system", "content": "be brief and kind"},
    {"role": "user", "content": [{"type": "text", "text": "look at"},
                                 {"type": "image_url", "image_url": {"url": "data:x"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny and warm"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_count_equals_the_chat_usage_prompt_tokens(tools: list[dict[str, object]] | None) -> None:
    body: dict[str, object] = {"model": "sim-model", "messages": MESSAGES}
    if tools:
        body["tools"] = tools
    answer = tokenize(body, CONFIG)
    assert answer["count"] == parse_chat(body, CONFIG).prompt_tokens > 0
    assert answer["max_model_len"] == 4096
    assert answer["tokens"] == list(range(answer["count"]))


def test_a_prompt_counts_its_words() -> None:
    assert tokenize({"model": "sim-model", "prompt": "one two three"}, CONFIG)["count"] == 3


@pytest.mark.parametrize(("body", "status"), [
    ({"model": "nope", "messages": MESSAGES}, 404),
    ({"model": "sim-model"}, 400),
    ({"model": "sim-model", "messages": "hi"}, 400),
    ([], 400),
])
def test_bad_bodies_are_vllm_errors(body: object, status: int) -> None:
    with pytest.raises(SimError) as caught:
        tokenize(body, CONFIG)
    assert caught.value.status == status


async def test_served_over_http() -> None:
    transport = httpx.ASGITransport(app=create_app(CONFIG))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
        answer = await http.post("/tokenize", json={"model": "sim-model", "messages": MESSAGES})
        chat = await http.post("/v1/chat/completions",
                               json={"model": "sim-model", "messages": MESSAGES})
    assert answer.status_code == 200
    assert answer.json()["count"] == chat.json()["usage"]["prompt_tokens"]
