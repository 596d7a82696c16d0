"""Steering (`response.steer`) on a connection's lanes (web/socket/), in process and
deterministic: the steered response's answers and its successor on its own lane, ahead of the
lane's waiting creates, the other lanes untouched; pending input outliving its lane.

The create service is the lanes' double (tests/unit/test_websocket_lanes.py), told the
steering run as the real one is: a steerable response holds after its first events until its
turn is asked to stop, then ends as a steered response does (`incomplete`, or `completed` on a
client's function call). Every frame is validated against the openai package's WebSocket
server event union; each response's own events also as a stream (check_stream).
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import InvalidRequest
from proxy.core.events.replay import events_from_response
from proxy.services.responses.create import Outcome
from proxy.services.responses.steering import Run
from proxy.web.socket.connection import Connection
from proxy.web.socket.lanes import LaneState
from tests.support.conformance import check_stream, validate_ws_frames
from tests.unit.test_websocket_lanes import (
    FINAL,
    Responses,
    Script,
    Socket,
    encoded,
    of_lane,
    send,
    settle,
    whole,
)

STEER_EVENTS = {"response.steer.accepted", "response.steer.pending", "response.steer.failed"}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
        "arguments": "{}", "status": "completed"}


@dataclass
class Steerable:
    """A response that streams its first events, then runs until a steer stops it, and ends
    with `output` (`incomplete`/`steered`, or `completed` when it ends on a client's call)."""

    response_id: str
    output: list[dict[str, Any]]


class Turn:
    """What steering needs of a generation: its assembler's final object, `steer()`."""

    def __init__(self) -> None:
        self.assembler = types.SimpleNamespace(final=None)
        self.stopped = asyncio.Event()

    async def steer(self) -> None:
        self.stopped.set()


class SteeredResponses(Responses):
    def __init__(self) -> None:
        super().__init__()
        self.steerable: dict[str, Steerable] = {}

    async def create(self, tenant: str, body: dict[str, Any], **kwargs: Any) -> Outcome:
        name = _name(body)
        run: Run = kwargs["steering"]
        self.started.append(name)
        self.bodies.append(body)
        spec = self.steerable.get(name)
        if spec is not None:
            turn = Turn()
            run.attach(spec.response_id, turn)  # type: ignore[arg-type]
            return Outcome(stream=self._steered(name, spec, turn))
        script = self.scripts[name]
        if script.error is not None:
            raise script.error
        run.attach(f"resp_{name}", _ended_turn())  # a response that runs unsteered
        return Outcome(stream=self._stream(name, script))

    async def _steered(self, name: str, spec: Steerable, turn: Turn
                       ) -> AsyncIterator[list[tuple[str, bytes]]]:
        calls = any(item["type"] == "function_call" for item in spec.output)
        final = {**FINAL, "id": spec.response_id, "output": spec.output,
                 "status": "completed" if calls else "incomplete",
                 "incomplete_details": None if calls else {"reason": "steered"}}
        events = [(e["type"], orjson.dumps(e)) for e in events_from_response(final)]
        try:
            yield events[:2]
            await turn.stopped.wait()
            turn.assembler.final = final  # made with its terminal event, before it is sent
            yield events[2:]
        finally:
            self.closed.append(name)


def _ended_turn() -> Any:
    turn = Turn()
    turn.assembler.final = {"status": "completed", "output": []}
    return turn


def _name(body: dict[str, Any]) -> str:
    """A create's script: its `input`, or the text of its last message (a successor's)."""
    given = body["input"]
    if isinstance(given, str):
        return given
    last = given[-1]
    return str(last.get("content") or last.get("output"))


def connect() -> tuple[Connection, SteeredResponses, Socket]:
    from proxy.settings.groups import LimitSettings, StreamSettings

    responses, socket = SteeredResponses(), Socket()
    connection = Connection(socket, responses,  # type: ignore[arg-type]
                            StreamSettings(send_timeout=5.0, ws_max_lanes=8), LimitSettings())
    return connection, responses, socket


async def steer(connection: Connection, target: str, text: str) -> None:
    frame = {"type": "response.steer", "previous_response_id": target, "input": text}
    await connection.receive(json.dumps(frame), None)


def responses_of(frames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each response's own events, in order (steer events and errors aside)."""
    out: list[list[dict[str, Any]]] = []
    for frame in frames:
        if frame["type"] in STEER_EVENTS or frame["type"] == "error":
            continue
        if frame["type"] == "response.created":
            out.append([])
        out[-1].append({k: v for k, v in frame.items() if k != "stream_id"})
    return out


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


async def test_a_steer_on_a_named_lane_runs_its_successor_there_before_the_lanes_queue(
        ) -> None:
    connection, responses, socket = connect()
    responses.steerable = {"story": Steerable("resp_story", [])}
    responses.scripts = {"turn left": whole("resp_succ"), "queued": whole("resp_queued")}
    await send(connection, "l", input="story")
    await send(connection, "l", input="queued")  # waits behind the steered response
    await settle(connection)
    await steer(connection, "resp_story", "turn left")
    await settle(connection)
    assert responses.started == ["story", "turn left", "queued"]
    frames = socket.frames
    validate_ws_frames(frames)
    assert of_lane(frames, "l") == frames  # every frame, steer events too, echoes the lane
    accepted = [f for f in frames if f["type"] == "response.steer.accepted"]
    assert accepted == [{"type": "response.steer.accepted", "sequence_number": 0,
                         "steer": {"id": accepted[0]["steer"]["id"],
                                   "previous_response_id": "resp_story"},
                         "stream_id": "l"}]
    steered, successor, queued = responses_of(frames)
    for events in (steered, successor, queued):
        check_stream(events)
    assert steered[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    assert [e["response"]["id"] for e in (successor[0], queued[0])] == ["resp_succ",
                                                                         "resp_queued"]
    # The successor: the steered response's create continuing from it with the steer's
    # input; its lane is the transport's, never a create parameter.
    body = responses.bodies[1]
    assert body["previous_response_id"] == "resp_story"
    assert body["input"] == [{"type": "message", "role": "user", "content": "turn left"}]
    assert "stream_id" not in body
    await connection.close()


async def test_a_steered_response_with_a_successor_keeps_its_lane_running(
        ) -> None:
    """The unnamed lane refuses a create while a response runs; a steered response's
    successor is part of that run, so its terminal frame leaves the lane `RUNNING`."""
    connection, responses, socket = connect()
    responses.steerable = {"story": Steerable("resp_story", [])}
    gate = asyncio.Event()
    responses.scripts = {"turn left": whole("resp_succ", gate)}
    states: list[tuple[str, LaneState]] = []
    plain = socket.send_text

    async def send_text(text: str) -> None:
        states.append((json.loads(text)["type"], connection.lanes[None].state))
        await plain(text)

    socket.send_text = send_text  # type: ignore[method-assign]
    await send(connection, input="story")
    await settle(connection)
    await steer(connection, "resp_story", "turn left")
    await settle(connection)
    assert ("response.incomplete", LaneState.RUNNING) in states
    await send(connection, input="too soon")
    assert socket.frames[-1]["error"]["code"] == "response_in_progress"
    gate.set()
    await settle(connection)
    assert states[-1] == ("response.completed", LaneState.CLOSING)
    assert responses.started == ["story", "turn left"]


async def test_a_steer_on_one_lane_leaves_another_lanes_response_as_it_streams() -> None:
    connection, responses, socket = connect()
    responses.steerable = {"story": Steerable("resp_story", [])}
    gate = asyncio.Event()
    responses.scripts = {"turn left": whole("resp_succ"), "other": whole("resp_other", gate)}
    await send(connection, "a", input="story")
    await send(connection, "b", input="other")
    await settle(connection)
    await steer(connection, "resp_story", "turn left")
    await settle(connection)
    # Lane a: steered, its successor run to its end, while lane b's response still waits.
    assert [e[-1]["type"] for e in responses_of(of_lane(socket.frames, "a"))] == [
        "response.incomplete", "response.completed"]
    assert connection.lanes["b"].state is LaneState.RUNNING
    gate.set()
    await settle(connection)
    frames = socket.frames
    validate_ws_frames(frames)
    other = of_lane(frames, "b")
    assert [{k: v for k, v in f.items() if k != "stream_id"} for f in other] == [
        json.loads(data) for _, data in encoded("resp_other")]
    assert not any(f["type"] in STEER_EVENTS for f in other)
    assert sorted({f.get("stream_id") for f in frames}) == ["a", "b"]


async def test_a_successor_waits_for_no_other_lanes_closing() -> None:
    """A client's continuation waits for the other lanes' closing responses (it may continue
    one); a successor continues its own lane's response, closed already, so it starts while
    another lane is still closing."""
    connection, responses, socket = connect()
    responses.steerable = {"story": Steerable("resp_story", [])}
    closing = asyncio.Event()
    responses.scripts = {"turn left": whole("resp_succ"),
                         "other": Script([encoded("resp_other"), closing])}
    await send(connection, "a", input="story")
    await send(connection, "x", input="other")
    await settle(connection)
    assert connection.lanes["x"].state is LaneState.CLOSING
    await steer(connection, "resp_story", "turn left")
    await settle(connection)
    assert responses.started == ["story", "other", "turn left"]
    assert [e[-1]["type"] for e in responses_of(of_lane(socket.frames, "a"))] == [
        "response.incomplete", "response.completed"]
    closing.set()
    await settle(connection)
    validate_ws_frames(socket.frames)


async def test_steers_pending_on_a_lanes_call_outlive_the_lane_and_lead_its_continuation(
        ) -> None:
    """A response that ends on the client's call: its steers pending (on its lane), the lane
    forgotten once idle, and the client's continuation on that lane gets the queued input
    first; a continuation from another lane (a fork) does not take it."""
    connection, responses, socket = connect()
    responses.steerable = {"weather": Steerable("resp_weather", [CALL])}
    responses.scripts = {"rain": whole("resp_next"), "fork": whole("resp_fork")}
    await send(connection, "l", input="weather")
    await settle(connection)
    await steer(connection, "resp_weather", "also Bergen")
    await settle(connection)
    assert "l" not in connection.lanes  # idle: forgotten
    pending = [f for f in socket.frames if f["type"] == "response.steer.pending"]
    assert [(p["stream_id"], p["required_input"]) for p in pending] == [
        ("l", [{"type": "function_call_output", "call_id": "call_1", "name": "get_weather"}])]
    output = {"type": "function_call_output", "call_id": "call_1", "output": "rain"}
    await send(connection, "m", input=[{**output, "output": "fork"}],
               previous_response_id="resp_weather")
    await settle(connection)
    assert responses.bodies[-1]["input"] == [{**output, "output": "fork"}]
    await send(connection, "l", input=[output], previous_response_id="resp_weather")
    await settle(connection)
    assert responses.bodies[-1]["input"] == [
        {"type": "message", "role": "user", "content": "also Bergen"}, output]
    validate_ws_frames(socket.frames)
    assert [f["type"] for f in of_lane(socket.frames, "l")][-1] == "response.completed"


async def test_a_successor_that_cannot_be_created_returns_its_input_on_the_lane() -> None:
    """No error frame (the client sent no create): `response.steer.failed` with the steer's
    id and input, echoing the lane; the lane then runs its waiting create."""
    connection, responses, socket = connect()
    responses.steerable = {"story": Steerable("resp_story", [])}
    responses.scripts = {"bad": Script(error=InvalidRequest("no", param="input")),
                         "queued": whole("resp_queued")}
    await send(connection, "l", input="story")
    await send(connection, "l", input="queued")
    await settle(connection)
    await steer(connection, "resp_story", "bad")
    await settle(connection)
    frames = socket.frames
    validate_ws_frames(frames)
    assert "error" not in kinds(frames)
    (accepted,) = [f for f in frames if f["type"] == "response.steer.accepted"]
    (failed,) = [f for f in frames if f["type"] == "response.steer.failed"]
    assert failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"] == {"id": accepted["steer"]["id"], "input": "bad",
                               "previous_response_id": "resp_story"}
    assert failed["stream_id"] == "l"
    assert responses.started == ["story", "bad", "queued"]
    assert [e[-1]["type"] for e in responses_of(frames)] == ["response.incomplete",
                                                             "response.completed"]
