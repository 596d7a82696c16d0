"""web/socket/: a WebSocket connection's lanes (`stream_id`), in process and deterministic.

The create service is a double whose streams wait on events the test sets, so "lane b runs while
lane a waits" is a fact of the script, not of a clock. Every frame the connection sends is
checked whole (one JSON object per frame) and against the openai package's server event union.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import types
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, ProxyError
from proxy.core.events.replay import events_from_response
from proxy.services.responses.create import Outcome
from proxy.settings.groups import LimitSettings, StreamSettings
from proxy.web.socket.connection import Connection
from proxy.web.socket.lanes import QUEUE_BOUND, LaneState
from tests.support.assembly import assemble, golden_bytes
from tests.support.conformance import check_stream, validate_ws_frames

FINAL = assemble(golden_bytes("text"))[-1]["response"]


def encoded(response_id: str) -> list[tuple[str, bytes]]:
    """A real event sequence (the replay of a final object), encoded as the service does."""
    return [(e["type"], orjson.dumps(e))
            for e in events_from_response({**FINAL, "id": response_id})]


@dataclass
class Script:
    """What one create does: batches to yield, gates to wait on between them, or an error."""

    steps: list[list[tuple[str, bytes]] | asyncio.Event] = field(default_factory=list)
    error: ProxyError | None = None


def whole(response_id: str, gate: asyncio.Event | None = None, at: int = 2) -> Script:
    """A response's events in two batches, `gate` (if any) waited on after the first `at`."""
    events = encoded(response_id)
    steps: list[list[tuple[str, bytes]] | asyncio.Event] = [events[:at]]
    if gate is not None:
        steps.append(gate)
    steps.append(events[at:])
    return Script(steps)


class Responses:
    """The create service's double: each create runs the script named by its `input`."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.started: list[str] = []
        self.closed: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    def setting_up(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    async def create(self, tenant: str, body: dict[str, Any], **_: Any) -> Outcome:
        name = body["input"]
        self.started.append(name)
        self.bodies.append(body)
        script = self.scripts[name]
        if script.error is not None:
            raise script.error
        return Outcome(stream=self._stream(name, script))

    async def _stream(self, name: str, script: Script
                      ) -> AsyncIterator[list[tuple[str, bytes]]]:
        try:
            for step in script.steps:
                if isinstance(step, asyncio.Event):
                    await step.wait()
                else:
                    yield step
        finally:
            self.closed.append(name)


class Socket:
    """A Starlette WebSocket's double: what `Connection` reads and calls."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] = {}
        self.url = types.SimpleNamespace(path="/v1/responses")
        web = types.SimpleNamespace(limiter=None)  # the part of WebState a connection reads
        self.app = types.SimpleNamespace(state=types.SimpleNamespace(web=web))
        self.texts: list[str] = []

    async def send_text(self, text: str) -> None:
        self.texts.append(text)

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.texts]  # each frame one whole object


def connect(*, lanes: int = 8, max_body_bytes: int = 1 << 20
            ) -> tuple[Connection, Responses, Socket]:
    responses, socket = Responses(), Socket()
    connection = Connection(socket, responses,  # type: ignore[arg-type]
                            StreamSettings(send_timeout=5.0, ws_max_lanes=lanes),
                            LimitSettings(max_body_bytes=max_body_bytes))
    return connection, responses, socket


async def send(connection: Connection, stream_id: str | None = None, **body: Any) -> None:
    frame = {"type": "response.create", "model": "m", **body}
    if stream_id is not None:
        frame["stream_id"] = stream_id
    await connection.receive(json.dumps(frame), None)


async def settle(connection: Connection, turns: int = 200) -> None:
    """Lets the lanes' tasks run until none can go further (bounded in loop turns)."""
    for _ in range(turns):
        await asyncio.sleep(0)


def of_lane(frames: list[dict[str, Any]], stream_id: str | None) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("stream_id") == stream_id]


async def test_two_lanes_interleave_whole_frames_each_in_order_with_its_stream_id() -> None:
    connection, responses, socket = connect()
    gate = asyncio.Event()
    responses.scripts = {"a": whole("resp_a", gate), "b": whole("resp_b")}
    await send(connection, "left", input="a")
    await send(connection, "right", input="b")
    await settle(connection)
    # a waits at its gate; b ran to its end meanwhile.
    kinds = [(f["stream_id"], f["type"]) for f in socket.frames]
    assert kinds[:2] == [("left", "response.created"), ("left", "response.in_progress")]
    assert ("right", "response.completed") in kinds
    assert ("left", "response.completed") not in kinds
    gate.set()
    await settle(connection)
    frames = socket.frames
    validate_ws_frames(frames)
    for stream_id, response_id in (("left", "resp_a"), ("right", "resp_b")):
        mine = of_lane(frames, stream_id)
        check_stream([{k: v for k, v in f.items() if k != "stream_id"} for f in mine])
        assert {f["response"]["id"] for f in mine if "response" in f} == {response_id}
    assert of_lane(frames, None) == []  # every frame carries its lane
    assert connection.lanes == {}  # both ended: nothing kept
    # Each lane's frames are the service's bytes with the field spliced in, nothing else.
    assert socket.texts[0] == (encoded("resp_a")[0][1][:-1] + b',"stream_id":"left"}').decode()


async def test_a_create_on_a_busy_lane_waits_and_runs_after_in_order() -> None:
    connection, responses, socket = connect()
    gate = asyncio.Event()
    responses.scripts = {"1": whole("resp_1", gate), "2": whole("resp_2"), "3": whole("resp_3")}
    for name in ("1", "2", "3"):
        await send(connection, "lane", input=name)
    await settle(connection)
    assert responses.started == ["1"]  # the others wait: queued, not refused
    assert connection.lanes["lane"].waiting == 2
    assert all(f["type"] != "error" for f in socket.frames)
    gate.set()
    await settle(connection)
    assert responses.started == ["1", "2", "3"]
    frames = socket.frames
    validate_ws_frames(frames)
    order = [f["response"]["id"] for f in frames if f["type"] == "response.created"]
    assert order == ["resp_1", "resp_2", "resp_3"]
    ends = [i for i, f in enumerate(frames) if f["type"] == "response.completed"]
    starts = [i for i, f in enumerate(frames) if f["type"] == "response.created"]
    assert ends[0] < starts[1] and ends[1] < starts[2]  # one after another, never overlapping


async def test_a_lane_past_the_bound_is_refused_naming_stream_id_and_the_others_go_on(
        ) -> None:
    connection, responses, socket = connect(lanes=2)
    gate = asyncio.Event()
    responses.scripts = {"a": whole("resp_a", gate), "b": whole("resp_b", gate),
                         "c": whole("resp_c"), "plain": whole("resp_plain")}
    await send(connection, "a", input="a")
    await send(connection, "b", input="b")
    await send(connection, "c", input="c")
    await settle(connection)
    errors = [f for f in socket.frames if f["type"] == "error"]
    assert len(errors) == 1
    assert errors[0]["error"]["param"] == "stream_id"
    assert errors[0]["error"]["code"] == "too_many_lanes"
    assert errors[0]["stream_id"] == "c" and errors[0]["status"] == 400
    assert "c" not in responses.started
    # The unnamed lane is the connection's own: not counted against the bound.
    await send(connection, input="plain")
    await settle(connection)
    assert of_lane(socket.frames, None)[-1]["type"] == "response.completed"
    gate.set()
    await settle(connection)
    await send(connection, "c", input="c")  # once lanes have ended, a new one runs
    await settle(connection)
    validate_ws_frames(socket.frames)
    assert of_lane(socket.frames, "c")[-1]["type"] == "response.completed"


async def test_a_lanes_queue_is_bounded_and_the_refusal_names_its_stream_id() -> None:
    connection, responses, socket = connect()
    gate = asyncio.Event()
    responses.scripts = {"first": whole("resp_first", gate), "next": whole("resp_next")}
    await send(connection, "q", input="first")
    for _ in range(QUEUE_BOUND):
        await send(connection, "q", input="next")
    await send(connection, "q", input="next")
    await settle(connection)
    errors = [f for f in socket.frames if f["type"] == "error"]
    assert [(e["stream_id"], e["error"]["code"], e["error"]["param"]) for e in errors] == [
        ("q", "lane_queue_full", "stream_id")]
    validate_ws_frames(errors)
    gate.set()
    await settle(connection, turns=2000)
    assert responses.started == ["first"] + ["next"] * QUEUE_BOUND


async def test_the_creates_waiting_on_a_connection_hold_at_most_max_body_bytes() -> None:
    connection, responses, socket = connect(max_body_bytes=400)
    gate = asyncio.Event()
    responses.scripts = {"a": whole("resp_a", gate), "b": whole("resp_b", gate), "x": whole("x")}
    await send(connection, "a", input="a")
    await send(connection, "b", input="b")
    await send(connection, "a", input="x", metadata={"pad": "p" * 150})  # ~220 bytes: waits
    await send(connection, "b", input="x", metadata={"pad": "p" * 150})  # would pass 400
    await settle(connection)
    errors = [f for f in socket.frames if f["type"] == "error"]
    assert [(e["stream_id"], e["error"]["code"]) for e in errors] == [("b", "lane_queue_full")]
    assert "--max-body-bytes" in errors[0]["error"]["message"]
    gate.set()
    await settle(connection)
    assert responses.started.count("x") == 1
    assert connection._queued_bytes == 0  # given back as the waiting create ran


async def test_close_cancels_every_lanes_response_and_drops_the_waiting_ones() -> None:
    connection, responses, _ = connect()
    never = asyncio.Event()
    responses.scripts = {"a": whole("resp_a", never), "b": whole("resp_b", never),
                         "c": whole("resp_c", never), "later": whole("resp_later")}
    await send(connection, "a", input="a")
    await send(connection, "b", input="b")
    await send(connection, input="c")
    await send(connection, "a", input="later")
    await settle(connection)
    assert sorted(responses.started) == ["a", "b", "c"] and responses.closed == []
    await connection.close()
    assert sorted(responses.closed) == ["a", "b", "c"]  # each stream closed: upstream aborted
    assert "later" not in responses.started
    assert connection.lanes == {} and connection._queued_bytes == 0


async def test_a_failed_create_on_a_lane_is_an_error_frame_with_its_stream_id() -> None:
    connection, responses, socket = connect()
    responses.scripts = {"bad": Script(error=InvalidRequest("Unknown model.", param="model",
                                                            code="model_not_found")),
                         "good": whole("resp_good")}
    await send(connection, "s1", input="bad")
    await settle(connection)
    await send(connection, "s1", input="good", background=True)
    await send(connection, "s1", input="good")
    await settle(connection)
    frames = socket.frames
    validate_ws_frames(frames)
    errors = [f for f in frames if f["type"] == "error"]
    assert [(e["stream_id"], e["error"]["param"]) for e in errors] == [
        ("s1", "model"), ("s1", "background")]
    assert of_lane(frames, "s1")[-1]["type"] == "response.completed"
    assert "stream_id" not in responses.bodies[-1]  # the envelope is not a create parameter
    await send(connection, "new", input="good", background=True)  # refused: makes no lane
    assert socket.frames[-1]["stream_id"] == "new" and connection.lanes == {}


@pytest.mark.parametrize("stream_id", [3, "", "x" * 129, ["a"]])
async def test_a_stream_id_that_is_no_lane_is_refused_naming_it(stream_id: Any) -> None:
    connection, responses, socket = connect()
    responses.scripts = {"a": whole("resp_a")}
    await connection.receive(json.dumps({"type": "response.create", "model": "m",
                                         "input": "a", "stream_id": stream_id}), None)
    await settle(connection)
    frames = socket.frames
    validate_ws_frames(frames)
    assert len(frames) == 1 and frames[0]["error"]["param"] == "stream_id"
    assert "stream_id" not in frames[0]  # not a lane: nothing to echo
    assert responses.started == []


async def test_without_stream_id_the_frames_are_the_services_bytes_and_one_runs_at_a_time(
        ) -> None:
    """A connection without lanes behaves as before them: the unnamed lane's frames are the
    service's bytes untouched; a create while its response runs is refused; one sent the
    moment the terminal event is read (the response still closing) waits and runs."""
    connection, responses, socket = connect()
    gate, closing = asyncio.Event(), asyncio.Event()
    events = encoded("resp_1")
    responses.scripts = {
        "1": Script([events[:2], gate, events[2:], closing]),  # closing: after its last frame
        "2": whole("resp_2"), "3": whole("resp_3")}
    await send(connection, input="1")
    await settle(connection)
    await send(connection, input="2")  # while running
    await settle(connection)
    assert socket.frames[-1]["error"]["code"] == "response_in_progress"
    assert "stream_id" not in socket.frames[-1]
    gate.set()
    await settle(connection)
    assert connection.lanes[None].state is LaneState.CLOSING
    await send(connection, input="3")  # its terminal event is out: waits for the closing
    await settle(connection)
    assert responses.started == ["1"]
    closing.set()
    await settle(connection)
    assert responses.started == ["1", "3"]
    sent = [text.encode() for text in socket.texts if '"type":"error"' not in text]
    assert sent == [data for _, data in events + encoded("resp_3")]
    validate_ws_frames(socket.frames)


async def test_run_next_goes_ahead_of_the_waiting_creates() -> None:
    """The seam steering's successor uses: the server's own next create on a lane."""
    connection, responses, _ = connect()
    gate = asyncio.Event()
    responses.scripts = {"1": whole("resp_1", gate), "2": whole("resp_2"),
                         "successor": whole("resp_s")}
    await send(connection, "l", input="1")
    await send(connection, "l", input="2")
    await settle(connection)
    successor = connection.steering.begin({"model": "m", "input": "successor"})
    successor.automatic = True  # as steering makes it (services/responses/steering.py `end`)
    connection.lanes["l"].run_next(successor)
    gate.set()
    await settle(connection)
    assert responses.started == ["1", "successor", "2"]


async def test_a_send_past_the_watchdog_breaks_the_connection() -> None:
    connection, responses, socket = connect()
    connection._streams = StreamSettings(send_timeout=0.01)
    stuck = asyncio.Event()

    async def send_text(text: str) -> None:
        await stuck.wait()  # a client that stopped reading

    socket.send_text = send_text  # type: ignore[method-assign]
    responses.scripts = {"a": whole("resp_a"), "b": whole("resp_b")}
    await send(connection, "a", input="a")
    await send(connection, "b", input="b")
    await asyncio.wait_for(connection.broken, 5)
    assert isinstance(connection.failure, TimeoutError)
    await connection.close()
    assert sorted(responses.closed) == ["a", "b"]


@pytest.mark.parametrize("stream_id", [None, "l"])
async def test_a_lane_is_closing_before_its_terminal_frame_goes_out(
        stream_id: str | None) -> None:
    """Each event of a batch is one text frame, its JSON as the service made it (nothing
    parsed: here a terminal event whose JSON does not start with its type); the lane is
    `CLOSING` before the terminal event's frame goes out (a client may answer the moment it
    reads it)."""
    connection, responses, socket = connect()
    batches = [[("response.created", b'{"type":"response.created","sequence_number":0}')],
               [("response.output_text.delta", b'{"type":"response.output_text.delta"}'),
                ("response.completed", b'{"sequence_number":2,"type":"response.completed"}')]]
    responses.scripts = {"1": Script(list(batches))}
    sent: list[tuple[str, LaneState]] = []

    async def send_text(text: str) -> None:
        sent.append((text, connection.lanes[stream_id].state))

    socket.send_text = send_text  # type: ignore[method-assign]
    await send(connection, stream_id, input="1")
    await settle(connection)
    tag = "" if stream_id is None else ',"stream_id":"l"'
    assert [text for text, _ in sent] == [data.decode()[:-1] + tag + "}" for batch in batches
                                          for _, data in batch]
    assert [state for _, state in sent] == [LaneState.RUNNING] * 2 + [LaneState.CLOSING]


async def test_a_fork_sent_as_another_lanes_terminal_event_arrives_waits_for_its_closing(
        ) -> None:
    """A lane's create continuing a response of another lane, sent the moment that response's
    terminal event is read, runs once that response has closed (its chain remembered)."""
    connection, responses, socket = connect()
    closing = asyncio.Event()
    events = encoded("resp_main")
    responses.scripts = {"main": Script([events, closing]), "fork": whole("resp_fork"),
                         "fresh": whole("resp_fresh")}
    await send(connection, "main", input="main")
    await settle(connection)
    assert socket.frames[-1]["type"] == "response.completed"
    assert connection.lanes["main"].state is LaneState.CLOSING
    await send(connection, "fork", input="fork", previous_response_id="resp_main")
    await send(connection, "other", input="fresh")  # continues nothing: runs at once
    await settle(connection)
    assert responses.started == ["main", "fresh"]
    closing.set()
    await settle(connection)
    assert responses.started == ["main", "fresh", "fork"]
    assert of_lane(socket.frames, "fork")[-1]["type"] == "response.completed"


async def test_only_a_lanes_frames_are_spliced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Echoing `stream_id` costs a connection without lanes nothing per event: its frames
    never pass through the splice, a lane's each do once."""
    from proxy.web.socket import lanes

    splices: list[bytes] = []

    def counting(event: bytes, tag: bytes) -> bytes:
        splices.append(event)
        return event[:-1] + tag

    monkeypatch.setattr(lanes, "tagged", counting)
    connection, responses, socket = connect()
    responses.scripts = {"plain": whole("resp_plain"), "laned": whole("resp_laned")}
    await send(connection, input="plain")
    await settle(connection)
    assert splices == [] and len(socket.texts) == len(encoded("resp_plain"))
    await send(connection, "l", input="laned")
    await settle(connection)
    assert splices == [data for _, data in encoded("resp_laned")]
