"""The response cache end to end: two proxy processes (`--cache semantic`) sharing one real
redis-server, the simulator as the fleet, the official `openai` SDK as the client.

One instance fills the cache, the other serves the hits: JSON and SSE clients from one entry,
strictly validated streams on both routes, a hit that is stored and chained, a paraphrase, and
a client that leaves mid-stream storing nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

KEY = "sk-cache-one"
QUESTION = ("For a long lecture about energy in ecosystems, please explain in 3 clear sentences "
            "how photosynthesis works in green plants and why this process matters so much for "
            "life on earth and for the oxygen in our atmosphere today.")


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess,
         redis_server: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/1"
    flags = ("--cache", "semantic", "--embedding-model", "sim-model")
    a = start_proxy(simulator.url, *flags, redis_url=url)
    b = start_proxy(simulator.url, *flags, redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def writes(server: ServerProcess) -> float:
    total = 0.0
    for line in httpx.get(server.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("proxy_cache_writes_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for_write(server: ServerProcess, before: float) -> None:
    """The write runs after the answer: wait for it (bounded) before asking again."""
    for _ in range(100):
        if writes(server) > before:
            return
        time.sleep(0.02)
    raise AssertionError("the answer was not kept")


def test_one_entry_serves_json_and_sse_from_either_instance(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    before = writes(a)
    first = SDK.get(a.url, KEY).responses.with_raw_response.create(
        model="sim-model", input="cached everywhere", store=False)
    assert first.headers["x-proxy-cache"] == "miss"
    wait_for_write(a, before)
    calls = sim.stats()["chat_requests"]
    client_b = SDK.get(b.url, KEY)
    json_hit = client_b.responses.with_raw_response.create(model="sim-model",
                                                           input="cached everywhere",
                                                           store=False)
    assert json_hit.headers["x-proxy-cache"] == "hit"
    assert json_hit.parse().output_text == first.parse().output_text
    events = [e.to_dict() for e in client_b.responses.create(
        model="sim-model", input="cached everywhere", store=False, stream=True)]
    check_stream(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == \
        "You said: cached everywhere"
    assert sim.stats()["chat_requests"] == calls


def test_a_streamed_miss_then_a_streamed_hit_on_both_routes(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    before = writes(a)
    streamed = [e.to_dict() for e in SDK.get(a.url, KEY).responses.create(
        model="sim-model", input="stream then replay", store=False, stream=True)]
    check_stream(streamed)
    wait_for_write(a, before)
    calls = sim.stats()["chat_requests"]
    again = [e.to_dict() for e in SDK.get(b.url, KEY).responses.create(
        model="sim-model", input="stream then replay", store=False, stream=True)]
    check_stream(again)
    assert again[-1]["response"]["output"][0]["content"][0]["text"] == \
        streamed[-1]["response"]["output"][0]["content"][0]["text"]
    assert sim.stats()["chat_requests"] == calls

    messages: Any = [{"role": "user", "content": "chat stream then replay"}]
    before = writes(a)
    live = list(SDK.get(a.url, KEY).chat.completions.create(
        model="sim-model", messages=messages, stream=True,
        stream_options={"include_usage": True}))
    wait_for_write(a, before)
    calls = sim.stats()["chat_requests"]
    replayed = list(SDK.get(b.url, KEY).chat.completions.create(
        model="sim-model", messages=messages, stream=True,
        stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in replayed if c.choices) == \
        "".join(c.choices[0].delta.content or "" for c in live if c.choices)
    assert [c.choices[0].finish_reason for c in replayed if c.choices][-1] == "stop"
    assert replayed[-1].usage is not None
    assert sim.stats()["chat_requests"] == calls


def test_a_stored_hit_is_retrievable_and_chains_on_the_other_instance(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    before = writes(a)
    original = SDK.get(a.url, KEY).responses.create(model="sim-model", input="chain a hit")
    wait_for_write(a, before)
    hit = SDK.get(b.url, KEY).responses.create(model="sim-model", input="chain a hit")
    assert hit.id != original.id and hit.output_text == original.output_text
    assert SDK.get(a.url, KEY).responses.retrieve(hit.id).output_text == hit.output_text
    follow = SDK.get(a.url, KEY).responses.create(model="sim-model", input="and next?",
                                                  previous_response_id=hit.id)
    assert follow.status == "completed"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["content"] for m in sent] == ["chain a hit", "You said: chain a hit",
                                            "and next?"]
    with pytest.raises(openai.NotFoundError):  # another key never sees it
        SDK.get(b.url, "sk-someone-else").responses.retrieve(hit.id)


def test_a_paraphrase_hits_across_instances(pair: tuple[ServerProcess, ServerProcess],
                                            sim: SimControl) -> None:
    a, b = pair
    before = writes(a)
    SDK.get(a.url, KEY).responses.create(model="sim-model", input=QUESTION, store=False)
    wait_for_write(a, before)
    calls = sim.stats()["chat_requests"]
    reply = SDK.get(b.url, KEY).responses.with_raw_response.create(
        model="sim-model", input=QUESTION.replace("please explain", "could you explain"),
        store=False)
    assert reply.headers["x-proxy-cache"] == "hit"
    assert reply.parse().output_text == f"You said: {QUESTION}"
    assert sim.stats()["chat_requests"] == calls


def test_a_client_that_leaves_mid_stream_stores_nothing(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, _ = pair
    body = {"model": "sim-model", "input": "leave me [[sim tokens=200 delay_ms=10]]",
            "store": False, "stream": True}
    before = writes(a)
    with httpx.stream("POST", a.url + "/v1/responses", json=body, timeout=30,
                      headers={"authorization": f"Bearer {KEY}"}) as response:
        assert response.headers["x-proxy-cache"] == "miss"
        for _ in response.iter_raw():
            break  # the first bytes, then we go away
    for _ in range(100):  # the upstream sees the abort
        if sim.stats()["streams_aborted"] >= 1:
            break
        time.sleep(0.02)
    assert sim.stats()["streams_aborted"] >= 1
    assert writes(a) == before
    again = httpx.post(a.url + "/v1/responses", json={**body, "stream": False}, timeout=30,
                       headers={"authorization": f"Bearer {KEY}"})
    assert again.headers["x-proxy-cache"] == "miss"
