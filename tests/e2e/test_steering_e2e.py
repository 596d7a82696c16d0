"""Steering on the WebSocket mode (`response.steer`), against real `serve` processes sharing one
Redis, the simulator streaming slowly on a directive, and every frame validated against the
`openai` package's server event union (`ResponsesServerEvent`); each response's own events
also as a stream (check_stream). The simulator's stats show what reached the fleet.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter
from websockets.sync.client import ClientConnection, connect

from tests.conftest import SimControl
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_mcp_server, start_proxy, wait_for

pytestmark = pytest.mark.e2e

KEY = "sk-steer"
AUTH = {"authorization": f"Bearer {KEY}"}
SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
STEER_EVENTS = {"response.steer.accepted", "response.steer.pending", "response.steer.failed"}
FIELDS = [f"field{i}" for i in range(10)]
FORM = {"type": "function", "name": "fill_form",
        "parameters": {"type": "object", "required": FIELDS,
                       "properties": {name: {"type": "string"} for name in FIELDS}}}
# A call whose arguments stream for seconds: ~20 argument fragments, 150 ms apart.
SLOW_CALL = "please call fill_form [[sim call=fill_form delay_ms=150]]"
SLOW_TEXT = "tell me a long story [[sim tokens=400 delay_ms=30]]"


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess
         ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/12"
    a = start_proxy(simulator.url, "--api-key", KEY, redis_url=url)
    b = start_proxy(simulator.url, "--api-key", KEY, redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def socket(server: ServerProcess) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers=AUTH, open_timeout=10, close_timeout=5)


def receive(ws: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(ws.recv(timeout=20))
    SERVER_EVENT.validate_python(frame, strict=True)
    return frame


def until(ws: ClientConnection, done: Callable[[dict[str, Any]], bool],
          limit: int = 3000) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    for _ in range(limit):
        frames.append(receive(ws))
        if done(frames[-1]):
            return frames
    raise AssertionError("the awaited frame never came")


def until_count(ws: ClientConnection, kind: str, count: int) -> list[dict[str, Any]]:
    """Frames until the `count`-th of type `kind`."""
    seen = 0

    def enough(frame: dict[str, Any]) -> bool:
        nonlocal seen
        seen += frame["type"] == kind
        return seen == count

    return until(ws, enough)


def create(ws: ClientConnection, **body: Any) -> None:
    ws.send(json.dumps({"type": "response.create", "model": "sim-model", **body}))


def steer(ws: ClientConnection, target: str, text: Any, **extra: Any) -> None:
    ws.send(json.dumps({"type": "response.steer", "previous_response_id": target,
                        "input": text, **extra}))


def is_type(*kinds: str) -> Callable[[dict[str, Any]], bool]:
    return lambda frame: frame["type"] in kinds


def responses(frames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each response's own events, in order (steer events aside)."""
    out: list[list[dict[str, Any]]] = []
    for frame in frames:
        if frame["type"] in STEER_EVENTS or frame["type"] == "error":
            continue
        if frame["type"] == "response.created":
            out.append([])
        out[-1].append(frame)
    return out


def of_type(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


def stored(server: ServerProcess, path: str) -> dict[str, Any]:
    answer = httpx.get(server.url + "/v1/responses/" + path, headers=AUTH, timeout=10)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def test_a_steer_mid_text_ends_the_response_steered_and_a_successor_continues_from_it(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    with socket(a) as ws:
        create(ws, input=SLOW_TEXT)
        frames = until(ws, is_type("response.output_text.delta"))
        steered_id = frames[0]["response"]["id"]
        steer(ws, steered_id, "now say goodbye")
        frames += until(ws, lambda f: f["type"] in TERMINAL
                        and f["response"]["id"] != steered_id)
    first, successor = responses(frames)
    check_stream(first)
    check_stream(successor)
    accepted = of_type(frames, "response.steer.accepted")
    assert len(accepted) == 1
    assert accepted[0]["steer"]["previous_response_id"] == steered_id
    assert frames.index(accepted[0]) < frames.index(first[-1])  # acknowledged before the end
    # The steered response: ended at once, its message closed as it stood.
    end = first[-1]["response"]
    assert first[-1]["type"] == "response.incomplete"
    assert end["incomplete_details"] == {"reason": "steered"}
    message = end["output"][0]
    assert message["status"] == "incomplete"
    partial = message["content"][0]["text"]
    assert partial and len(partial.split()) < 400
    # Its upstream request was aborted (vLLM frees the sequence).
    assert wait_for(lambda: sim.stats()["streams_aborted"] >= 1, 10)
    # The successor: started by the proxy, continuing from it with the steering input.
    created = successor[0]["response"]
    assert created["previous_response_id"] == steered_id
    assert successor[-1]["type"] == "response.completed"
    assert successor[-1]["response"]["output"][0]["content"][0]["text"] == \
        "You said: now say goodbye"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == partial
    assert sent[2]["content"] == "now say goodbye"
    # Both parts stored and chained, readable from the other instance.
    on_b = Response.model_validate(stored(b, steered_id))
    assert on_b.status == "incomplete" and on_b.incomplete_details is not None
    assert on_b.incomplete_details.reason == "steered"
    assert on_b.output[0].content[0].text == partial  # type: ignore[union-attr]
    next_on_b = Response.model_validate(stored(b, created["id"]))
    assert next_on_b.status == "completed" and next_on_b.previous_response_id == steered_id
    items = stored(b, created["id"] + "/input_items?order=asc")["data"]
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [("user",
                                                                      "now say goodbye")]


def test_steers_during_a_client_tool_call_wait_for_its_output_then_lead_the_next_input(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    with socket(a) as ws:
        create(ws, input=SLOW_CALL, tools=[FORM])
        frames = until(ws, is_type("response.function_call_arguments.delta"))
        response_id = frames[0]["response"]["id"]
        steer(ws, response_id, "also add a note")
        steer(ws, response_id, [{"role": "user", "content": [
            {"type": "input_text", "text": "and sign it"}]}])
        frames += until_count(ws, "response.steer.pending", 2)
        (events,) = responses(frames)
        check_stream(events)
        final = events[-1]["response"]
        # The call was not cut: the response completed with it, waiting for its output.
        assert events[-1]["type"] == "response.completed"
        call = final["output"][-1]
        assert call["type"] == "function_call" and call["status"] == "completed"
        assert sorted(json.loads(call["arguments"])) == sorted(FIELDS)
        accepted = of_type(frames, "response.steer.accepted")
        pending = of_type(frames, "response.steer.pending")
        assert [p["steer"]["id"] for p in pending] == [e["steer"]["id"] for e in accepted]
        assert len(pending) == 2
        assert all(frames.index(p) > frames.index(events[-1]) for p in pending)
        for event in pending:
            assert event["reason"] == "waiting_for_required_input"
            assert event["required_input"] == [{"type": "function_call_output",
                                                "call_id": call["call_id"],
                                                "name": "fill_form"}]
        assert of_type(frames, "response.created") == events[:1]  # no automatic successor
        # A steer while the client runs its tool: accepted, and pending at once.
        steer(ws, response_id, "then file it")
        late = until_count(ws, "response.steer.pending", 1)
        assert [f["type"] for f in late] == ["response.steer.accepted",
                                             "response.steer.pending"]
        assert late[1]["required_input"] == pending[0]["required_input"]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
        create(ws, tools=[FORM], previous_response_id=response_id, input=[output])
        after = until(ws, is_type(*TERMINAL, "error"))
    check_stream(after)
    assert after[-1]["type"] == "response.completed"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent[-5:]] == ["assistant", "user", "user", "user", "tool"]
    assert sent[-4]["content"] == "also add a note"
    assert "and sign it" in json.dumps(sent[-3]["content"])
    assert sent[-2]["content"] == "then file it"
    continuation = after[-1]["response"]["id"]
    items = stored(b, continuation + "/input_items?order=asc")["data"]
    assert [i["type"] for i in items] == ["message"] * 3 + ["function_call_output"]
    assert items[0]["content"][0]["text"] == "also add a note"


def test_more_than_eight_waiting_steers_are_refused_with_the_input_returned(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with socket(a) as ws:
        create(ws, input=SLOW_CALL, tools=[FORM])
        frames = until(ws, is_type("response.function_call_arguments.delta"))
        response_id = frames[0]["response"]["id"]
        for n in range(9):
            steer(ws, response_id, f"note {n}")
        frames += until_count(ws, "response.steer.pending", 8)
    failed = of_type(frames, "response.steer.failed")
    assert [(f["error"]["code"], f["steer"]["input"]) for f in failed] == [
        ("too_many_pending_steers", "note 8")]
    assert "id" not in failed[0]["steer"]
    assert len(of_type(frames, "response.steer.accepted")) == 8
    assert len(of_type(frames, "response.steer.pending")) == 8


def test_each_refusal_has_its_code_and_returns_the_input(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    conversation = httpx.post(a.url + "/v1/conversations", json={}, headers=AUTH, timeout=10)
    assert conversation.status_code == 200, conversation.text
    with socket(a) as ws:
        steer(ws, "resp_0000nothere", "hello")
        (unknown,) = until(ws, is_type("response.steer.failed"))
        assert unknown["error"]["code"] == "response_not_found"
        assert unknown["steer"] == {"input": "hello", "previous_response_id": "resp_0000nothere"}
        tool_output = [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]
        for target, text, extra in [("resp_1", tool_output, {}),
                                    ("resp_1", [], {}),
                                    ("resp_1", "hi", {"stream_id": "lane"})]:
            steer(ws, target, text, **extra)
            (invalid,) = until(ws, is_type("response.steer.failed"))
            assert invalid["error"]["code"] == "invalid_input"
            assert invalid["steer"]["input"] == text and "id" not in invalid["steer"]
        create(ws, input="a short answer")
        done = until(ws, is_type(*TERMINAL))
        steer(ws, done[-1]["response"]["id"], "too late")
        (late,) = until(ws, is_type("response.steer.failed"))
        assert late["error"]["code"] == "response_already_completed"
        create(ws, input="[[sim fail=error:2]] break")
        broken = until(ws, is_type(*TERMINAL))
        assert broken[-1]["type"] == "response.failed"
        steer(ws, broken[-1]["response"]["id"], "and now?")
        (inactive,) = until(ws, is_type("response.steer.failed"))
        assert inactive["error"]["code"] == "response_not_active"
        create(ws, input="talk [[sim tokens=60 delay_ms=30]]",
               conversation=conversation.json()["id"])
        frames = until(ws, is_type("response.output_text.delta"))
        steer(ws, frames[0]["response"]["id"], "stop")
        frames += until(ws, is_type(*TERMINAL))
    (unsupported,) = of_type(frames, "response.steer.failed")
    assert unsupported["error"]["code"] == "steering_not_supported"
    assert frames[-1]["type"] == "response.completed"  # it ran on, unsteered


def test_input_whose_successor_cannot_be_created_comes_back_and_the_socket_goes_on(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with socket(a) as ws:
        create(ws, input=SLOW_TEXT)
        frames = until(ws, is_type("response.output_text.delta"))
        steered_id = frames[0]["response"]["id"]
        # The successor's last user message carries the directive: the fleet refuses it (400).
        steer(ws, steered_id, "[[sim fail=http:400]] now")
        frames += until(ws, is_type("response.steer.failed"))
        (accepted,) = of_type(frames, "response.steer.accepted")
        (failed,) = of_type(frames, "response.steer.failed")
        assert failed["error"]["code"] == "successor_creation_failed"
        assert failed["steer"] == {"id": accepted["steer"]["id"],
                                   "input": "[[sim fail=http:400]] now",
                                   "previous_response_id": steered_id}
        assert of_type(frames, "error") == []  # the client sent no create that failed
        assert [r[-1]["type"] for r in responses(frames)] == ["response.incomplete"]
        create(ws, input="still here")
        after = until(ws, is_type(*TERMINAL, "error"))
    assert after[-1]["type"] == "response.completed"


def until_ends(ws: ClientConnection, count: dict[str | None, int]) -> list[dict[str, Any]]:
    """Frames until each lane named in `count` has had that many terminal events."""
    seen: dict[str | None, int] = {}

    def enough(frame: dict[str, Any]) -> bool:
        if frame["type"] in TERMINAL:
            lane = frame.get("stream_id")
            seen[lane] = seen.get(lane, 0) + 1
        return all(seen.get(lane, 0) >= n for lane, n in count.items())

    return until(ws, enough)


def of_lane(frames: list[dict[str, Any]], stream_id: str) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("stream_id") == stream_id]


def text_of(events: list[dict[str, Any]]) -> str:
    text: str = events[-1]["response"]["output"][0]["content"][0]["text"]
    return text


def test_a_steer_on_a_named_lane_runs_its_successor_there_before_the_lanes_queue(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    with socket(a) as ws:
        create(ws, input=SLOW_TEXT, stream_id="l")
        create(ws, input="then this", stream_id="l")  # waits behind the first on the lane
        frames = until(ws, is_type("response.output_text.delta"))
        steered_id = frames[0]["response"]["id"]
        steer(ws, steered_id, "now say goodbye")  # no stream_id: the response names the lane
        frames += until_ends(ws, {"l": 3})
    assert [f.get("stream_id") for f in frames] == ["l"] * len(frames)  # steer events too
    steered, successor, queued = responses(frames)
    for events in (steered, successor, queued):
        check_stream(events)
    (accepted,) = of_type(frames, "response.steer.accepted")
    assert accepted["sequence_number"] == 0
    assert accepted["steer"]["previous_response_id"] == steered_id
    assert steered[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    # The successor, ahead of the create that was waiting on the lane.
    assert successor[0]["response"]["previous_response_id"] == steered_id
    assert text_of(successor) == "You said: now say goodbye"
    assert queued[0]["response"]["previous_response_id"] is None
    assert text_of(queued) == "You said: then this"
    next_on_b = Response.model_validate(stored(b, successor[0]["response"]["id"]))
    assert next_on_b.previous_response_id == steered_id


def test_a_steer_on_one_lane_leaves_another_lanes_response_streaming_whole(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with socket(a) as ws:
        create(ws, input=SLOW_TEXT, stream_id="steered")
        create(ws, input="count to many [[sim tokens=150 delay_ms=30]]", stream_id="other")
        frames = until(ws, lambda f: f["type"] == "response.output_text.delta"
                       and f["stream_id"] == "steered")
        steered_id = frames[0]["response"]["id"]
        steer(ws, steered_id, "stop there")
        frames += until_ends(ws, {"steered": 2, "other": 1})
    assert {f["stream_id"] for f in frames} == {"steered", "other"}
    assert {f["stream_id"] for f in frames if f["type"] in STEER_EVENTS} == {"steered"}
    first, successor = responses(of_lane(frames, "steered"))
    assert first[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    assert successor[0]["response"]["previous_response_id"] == steered_id
    (other,) = responses(of_lane(frames, "other"))
    check_stream(other)  # whole, in order, its own numbers from 0
    assert other[-1]["type"] == "response.completed"
    assert other[-1]["response"]["incomplete_details"] is None
    assert len(text_of(other).split()) == 150


def _sdk_steered(proxy: ServerProcess, **lane: Any) -> list[Any]:
    """Through the SDK's own WebSocket client: a slow create (`lane`: its `stream_id`, if
    any), steered at its first text delta; every event up to the successor's terminal one."""

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
        events: list[Any] = []
        steered = False
        async with client, client.responses.connect(max_retries=0) as connection:
            await connection.response.create(model="sim-model", input=SLOW_TEXT, **lane)
            async for event in connection:
                events.append(event)
                if event.type == "response.output_text.delta" and not steered:
                    steered = True
                    await connection.response.steer(
                        input="wrap it up", previous_response_id=events[0].response.id)
                if event.type in TERMINAL and event.response.id != events[0].response.id:
                    break
        return events

    return asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_sdks_websocket_client_steers_and_reads_the_successor(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """`AsyncOpenAI().responses.connect()` and its `response.steer`: every event parsed by the
    SDK as its own server event types."""
    events = _sdk_steered(pair[0])
    types = [type(e).__name__ for e in events]
    assert "ResponseSteerAcceptedEvent" in types
    assert types.count("ResponseWsCreated") == 2
    incomplete = next(e for e in events if e.type == "response.incomplete")
    assert incomplete.response.incomplete_details.reason == "steered"
    assert events[-1].type == "response.completed"
    assert events[-1].response.previous_response_id == events[0].response.id
    assert events[-1].response.output[0].content[0].text == "You said: wrap it up"


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_sdks_websocket_client_steers_a_response_on_a_lane(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """`connection.response.create(..., stream_id=...)` then `connection.response.steer(...)`
    (which names no lane): the SDK parses every frame as its own event types, and the steer's
    answer and the successor carry the steered response's `stream_id`."""
    events = _sdk_steered(pair[0], stream_id="sdk-lane")
    assert {event.stream_id for event in events} == {"sdk-lane"}
    accepted = [e for e in events if type(e).__name__ == "ResponseSteerAcceptedEvent"]
    assert len(accepted) == 1
    assert [type(e).__name__ for e in events].count("ResponseWsCreated") == 2
    assert events[-1].type == "response.completed"
    assert events[-1].response.previous_response_id == events[0].response.id
    assert events[-1].response.output[0].content[0].text == "You said: wrap it up"


# -- a tool loop the proxy runs (MCP) is steered between its turns ----------------------------
@pytest.fixture(scope="module")
def tools_server() -> Iterator[ServerProcess]:
    server = start_mcp_server()
    yield server
    server.stop(timeout=2)


@pytest.fixture(scope="module")
def mcp_proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--mcp-allow", "http://127.0.0.1", "--mcp-timeout", "20")
    yield server
    server.stop()


def test_a_steer_during_an_mcp_call_ends_the_response_after_the_call_not_a_turn_later(
        mcp_proxy: ServerProcess, tools_server: ServerProcess, sim: SimControl) -> None:
    tool = {"type": "mcp", "server_label": "calc", "server_url": f"{tools_server.url}/mcp",
            "require_approval": "never"}
    with socket(mcp_proxy) as ws:
        create(ws, tools=[tool], input='[[sim call=slow call_args={"seconds":3}]]')
        frames = until(ws, is_type("response.mcp_call_arguments.done"))
        steered_id = frames[0]["response"]["id"]
        steer(ws, steered_id, "[[sim tools=0]] never mind, just say hi")
        frames += until(ws, lambda f: f["type"] in TERMINAL
                        and f["response"]["id"] != steered_id)
    first, successor = responses(frames)
    check_stream(first)
    check_stream(successor)
    end = first[-1]["response"]
    assert end["incomplete_details"] == {"reason": "steered"}
    call = end["output"][-1]
    assert call["type"] == "mcp_call" and call["status"] == "completed"  # it ran whole
    # Two upstream turns in all: the steered response's first, then the successor's; the
    # turn that would have read the call's output never ran.
    assert sim.stats()["chat_requests"] == 2
    assert successor[0]["response"]["previous_response_id"] == steered_id
    assert successor[-1]["type"] == "response.completed"
    sent = sim.stats()["last_request"]["messages"]
    assert sent[-1]["content"] == "[[sim tools=0]] never mind, just say hi"
    assert any(m["role"] == "tool" for m in sent)  # the call and its output, before it
