"""State shared through one real Redis: two proxy processes act as one.

Create on A; retrieve, replay and delete on B; replay on B while A still streams; chains
through `previous_response_id` (tool turns included); conversations through the SDK; objects
scoped to the key that made them; a client that leaves a stored stream.
"""

from __future__ import annotations

import threading
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
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-tenant-one"
OTHER_KEY = "sk-tenant-two"
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[tuple[ServerProcess,
                                                                                  ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    flags = ("--api-key", KEY, "--api-key", OTHER_KEY)
    a = start_proxy(simulator.url, *flags, redis_url=url)
    b = start_proxy(simulator.url, *flags, redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def sdk(server: ServerProcess, key: str = KEY) -> openai.OpenAI:
    return SDK.get(server.url, key)


def auth(key: str = KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def sse(url: str, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
    with httpx.stream(method, url + path, headers=auth(), timeout=30, **kwargs) as response:
        assert response.status_code == 200, response.read()
        return data_payloads(b"".join(response.iter_raw()))


def test_create_on_a_retrieve_replay_and_delete_on_b(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    live = sse(a.url, "POST", "/v1/responses",
               json={"model": "sim-model", "input": "shared state", "stream": True})
    check_stream(live)
    response_id = live[0]["response"]["id"]
    retrieved = sdk(b).responses.retrieve(response_id)
    assert retrieved.to_dict() == live[-1]["response"]
    assert sse(b.url, "GET", f"/v1/responses/{response_id}?stream=true") == live
    items = sdk(b).responses.input_items.list(response_id)
    assert [i.content[0].text for i in items.data] == ["shared state"]  # type: ignore[union-attr]
    sdk(b).responses.delete(response_id)
    with pytest.raises(openai.NotFoundError):
        sdk(a).responses.retrieve(response_id)


def test_a_get_right_after_the_terminal_event_sees_the_final_object(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    for _ in range(5):
        with sdk(a).responses.stream(model="sim-model", input="race the store") as stream:
            final = stream.get_final_response()
            # immediately, on the other instance
            assert sdk(b).responses.retrieve(final.id).status == "completed"


def test_replay_on_b_while_a_streams_equals_a_stream(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    body = {"model": "sim-model", "input": "slowly [[sim tokens=40 delay_ms=25]]",
            "stream": True}
    seen: list[dict[str, Any]] = []
    first = threading.Event()
    replayed: list[dict[str, Any]] = []

    def follow() -> None:
        first.wait(10)
        response_id = seen[0]["response"]["id"]
        replayed.extend(sse(b.url, "GET", f"/v1/responses/{response_id}?stream=true"))

    reader = threading.Thread(target=follow)
    reader.start()
    with httpx.stream("POST", a.url + "/v1/responses", json=body, headers=auth(),
                      timeout=30) as response:
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            if not seen and b"\n\n" in buffer:
                seen.extend(data_payloads(buffer[:buffer.index(b"\n\n") + 2]))
                first.set()
        live = data_payloads(buffer)
    reader.join(30)
    assert replayed and replayed == live
    check_stream(live)


def test_starting_after_returns_exactly_the_later_events(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    live = sse(a.url, "POST", "/v1/responses",
               json={"model": "sim-model", "input": "count [[sim tokens=6]]", "stream": True})
    response_id = live[0]["response"]["id"]
    for k in (0, 3, len(live) - 2, len(live) - 1):
        tail = sse(b.url, "GET", f"/v1/responses/{response_id}?stream=true&starting_after={k}")
        assert tail == live[k + 1:]


def test_sdk_resume_with_starting_after(pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    live = sse(a.url, "POST", "/v1/responses",
               json={"model": "sim-model", "input": "resume me", "stream": True})
    response_id = live[0]["response"]["id"]
    with sdk(b).responses.stream(response_id=response_id, starting_after=4) as stream:
        resumed = [(event.type, event.sequence_number) for event in stream]
        final = stream.get_final_response()
    assert resumed == [(e["type"], e["sequence_number"]) for e in live[5:]]
    assert final.output_text == "You said: resume me"


def test_a_non_streamed_stored_response_replays_a_rebuilt_sequence(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    response = sdk(a).responses.create(model="sim-model", input="json only")
    events = sse(b.url, "GET", f"/v1/responses/{response.id}?stream=true")
    check_stream(events)
    assert events[-1]["response"] == response.to_dict()


def test_three_turn_chain_with_a_tool_turn(pair: tuple[ServerProcess, ServerProcess],
                                           sim: SimControl) -> None:
    a, b = pair
    first = sdk(a).responses.create(model="sim-model", input="call get_weather for Oslo",
                                    tools=[WEATHER])
    call = first.output[0]
    assert call.type == "function_call"
    second = sdk(b).responses.create(
        model="sim-model", previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "snow"}])
    assert "snow" in second.output_text
    third = sdk(a).responses.create(model="sim-model", previous_response_id=second.id,
                                    input="thanks", instructions="only now")
    assert third.output_text == "You said: thanks"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert sent[0]["content"] == "only now"  # instructions are not inherited, only current
    assert sent[2]["tool_calls"][0]["id"] == call.call_id
    assert sent[3] == {"role": "tool", "tool_call_id": call.call_id, "name": "get_weather",
                       "content": "snow"}
    assert sent[4]["content"] == second.output_text


def test_unknown_previous_response_is_400(pair: tuple[ServerProcess, ServerProcess]) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(pair[0]).responses.create(model="sim-model", input="x",
                                      previous_response_id="resp_nope")
    assert info.value.code == "previous_response_not_found"
    assert info.value.param == "previous_response_id"


def test_conversations_through_the_sdk(pair: tuple[ServerProcess, ServerProcess],
                                       sim: SimControl) -> None:
    a, b = pair
    conversation = sdk(a).conversations.create(
        items=[{"type": "message", "role": "user", "content": "my name is Ada"}],
        metadata={"topic": "names"})
    assert sdk(b).conversations.retrieve(conversation.id).metadata == {"topic": "names"}
    added = sdk(b).conversations.items.create(conversation.id, items=[
        {"type": "message", "role": "assistant", "content": "Nice to meet you, Ada."},
        {"type": "message", "role": "user", "content": "remember it"}])
    assert len(added.data) == 2
    first = sdk(a).responses.create(model="sim-model", input="what is my name?",
                                    conversation=conversation.id)
    second = sdk(b).responses.create(model="sim-model", input="and again?",
                                     conversation=conversation.id)
    sent = [m["content"] for m in sim.stats()["last_request"]["messages"]]
    assert sent == ["my name is Ada", "Nice to meet you, Ada.", "remember it",
                    "what is my name?", first.output_text, "and again?"]
    assert second.conversation is not None and second.conversation.id == conversation.id
    items = list(sdk(a).conversations.items.list(conversation.id, limit=2, order="asc"))
    assert len(items) == 7  # 3 added + 2 turns of (input, output); paged two at a time
    assert items[0].content[0].text == "my name is Ada"  # type: ignore[union-attr]
    one = sdk(b).conversations.items.retrieve(items[1].id, conversation_id=conversation.id)
    assert one.id == items[1].id
    sdk(b).conversations.items.delete(items[1].id, conversation_id=conversation.id)
    assert len(list(sdk(a).conversations.items.list(conversation.id))) == 6
    sdk(a).conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        sdk(b).conversations.retrieve(conversation.id)
    with pytest.raises(openai.BadRequestError):
        sdk(a).responses.create(model="sim-model", input="x", conversation=conversation.id,
                                previous_response_id=first.id)


def test_objects_are_scoped_to_the_key_that_made_them(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    mine = sdk(a).responses.create(model="sim-model", input="private")
    other = sdk(b, OTHER_KEY)
    for call in (lambda: other.responses.retrieve(mine.id),
                 lambda: other.responses.delete(mine.id),
                 lambda: other.responses.input_items.list(mine.id),
                 lambda: other.responses.create(model="sim-model", input="x",
                                                previous_response_id=mine.id)):
        with pytest.raises((openai.NotFoundError, openai.BadRequestError)):
            call()
    conversation = sdk(a).conversations.create()
    with pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(conversation.id)
    assert sdk(b).responses.retrieve(mine.id).id == mine.id  # the owner still sees it


def test_a_client_leaving_a_stored_stream_cancels_and_closes_it(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    body = {"model": "sim-model", "input": "leave early [[sim tokens=500 delay_ms=20]]",
            "stream": True}
    with httpx.stream("POST", a.url + "/v1/responses", json=body, headers=auth(),
                      timeout=30) as response:
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            if buffer.count(b"output_text.delta") >= 3:
                break
    response_id = data_payloads(buffer.split(b"\n\n")[0] + b"\n\n")[0]["response"]["id"]
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and sim.stats()["streams_aborted"] < 1:
        time.sleep(0.02)
    assert sim.stats()["streams_aborted"] == 1
    while time.monotonic() < deadline:
        if sdk(b).responses.retrieve(response_id).status == "cancelled":
            break
        time.sleep(0.05)
    assert sdk(b).responses.retrieve(response_id).status == "cancelled"
    replay = sse(b.url, "GET", f"/v1/responses/{response_id}?stream=true")
    assert replay[-1]["type"] == "response.cancelled"
    check_stream(replay)
