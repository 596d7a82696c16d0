"""WebSocket lanes (`stream_id` on `response.create`) against a real `serve` process.

Several responses on one socket: each lane's creates in order, lanes side by side up to
`--ws-max-lanes`, every frame of a lane echoing its `stream_id`, frames whole. A stalled stream
(the simulator's `fail=stall:K`: it stops after K tokens and holds the request open until the
proxy leaves) makes "lane b runs to its end while lane a is still running" a fact of the
script rather than of the machine's pace. Every frame is validated against the openai
package's WebSocket server event union (`ResponsesServerEvent`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import ResponsesServerEvent
from pydantic import TypeAdapter
from websockets.sync.client import ClientConnection, connect

from tests.conftest import SimControl
from tests.support.conformance import check_stream, validate_ws_frames
from tests.support.servers import ServerProcess, start_proxy, wait_for

pytestmark = pytest.mark.e2e

KEY = "sk-ws-lanes"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
STALLED = "held open [[sim tokens=40 fail=stall:3]]"  # three tokens, then nothing until we leave


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY, "--ws-max-lanes", "2",
                         "--max-body-bytes", "8192")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def short_lived(simulator: ServerProcess) -> Iterator[ServerProcess]:
    # Sockets live 6 s: room for two creates to start on a loaded machine, short to wait out.
    server = start_proxy(simulator.url, "--api-key", KEY, "--ws-max-age", "6")
    yield server
    server.stop()


def socket(server: ServerProcess) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers={"authorization": f"Bearer {KEY}"},
                   open_timeout=10, close_timeout=5)


def create(ws: ClientConnection, stream_id: str | None = None, **body: Any) -> None:
    frame: dict[str, Any] = {"type": "response.create", "model": "sim-model", "store": False,
                             **body}
    if stream_id is not None:
        frame["stream_id"] = stream_id
    ws.send(json.dumps(frame))


def read_until(ws: ClientConnection, done: Callable[[list[dict[str, Any]]], bool],
               limit: int = 3000) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    for _ in range(limit):
        frames.append(json.loads(ws.recv(timeout=30)))
        if done(frames):
            return frames
    raise AssertionError(f"not done after {limit} frames: {frames[-3:]}")


def ends(frames: list[dict[str, Any]], stream_id: str | None) -> int:
    """Terminal events and error frames of one lane."""
    return sum(1 for f in frames if f.get("stream_id") == stream_id
               and (f["type"] in TERMINAL or f["type"] == "error"))


def lane(frames: list[dict[str, Any]], stream_id: str | None) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("stream_id") == stream_id]


def responses_of(frames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A lane's frames cut into its responses (each from `response.created` on)."""
    out: list[list[dict[str, Any]]] = []
    for frame in frames:
        if frame["type"] == "response.created":
            out.append([])
        out[-1].append(frame)
    return out


def test_a_lane_runs_to_its_end_while_another_is_still_streaming(
        proxy: ServerProcess, sim: SimControl) -> None:
    with socket(proxy) as ws:
        create(ws, "held", input=STALLED)
        first = read_until(ws, lambda f: any(e["type"] == "response.output_text.delta"
                                              for e in f))
        create(ws, "quick", input="quick [[sim tokens=4]]")
        rest = read_until(ws, lambda f: ends(f, "quick") == 1)
        frames = first + rest
        validate_ws_frames(frames)
        assert {f.get("stream_id") for f in frames} == {"held", "quick"}
        quick = lane(frames, "quick")
        check_stream(quick)  # whole, in order, its own sequence numbers from 0
        held = lane(frames, "held")
        assert [f["sequence_number"] for f in held] == list(range(len(held)))
        assert all(f["type"] not in TERMINAL for f in held)  # still streaming meanwhile
    # The client left: the lane still running is cancelled, its upstream request closed.
    assert wait_for(lambda: sim.stats()["streams_aborted"] == 1, within=20), sim.stats()


def test_creates_of_one_lane_run_in_order_beside_another_lane(proxy: ServerProcess) -> None:
    with socket(proxy) as ws:
        create(ws, "a", input="one [[sim tokens=6]]")
        create(ws, "a", input="two [[sim tokens=6]]")  # waits behind "one": queued
        create(ws, "b", input="three [[sim tokens=6]]")
        frames = read_until(ws, lambda f: ends(f, "a") == 2 and ends(f, "b") == 1)
    validate_ws_frames(frames)
    assert all(f["type"] != "error" for f in frames)
    first, second = responses_of(lane(frames, "a"))
    (third,) = responses_of(lane(frames, "b"))
    for events in (first, second, third):
        check_stream(events)
        assert events[-1]["type"] == "response.completed"
    texts = [e["response"]["output"][0]["content"][0]["text"] for e in (first[-1], second[-1])]
    assert texts[0] != texts[1]
    # The second began only after the first had ended.
    assert frames.index(first[-1]) < frames.index(second[0])


def test_one_lane_more_than_ws_max_lanes_is_refused_and_leaving_cancels_them_all(
        proxy: ServerProcess, sim: SimControl) -> None:
    with socket(proxy) as ws:  # --ws-max-lanes 2
        create(ws, "x", input=STALLED)
        create(ws, "y", input=STALLED)
        read_until(ws, lambda f: {e.get("stream_id") for e in f
                                  if e["type"] == "response.output_text.delta"} == {"x", "y"})
        create(ws, "z", input="a third lane")
        refused = read_until(ws, lambda f: f[-1]["type"] == "error")[-1]
        validate_ws_frames([refused])
        assert refused["stream_id"] == "z"
        assert (refused["status"], refused["error"]["param"], refused["error"]["code"]) == (
            400, "stream_id", "too_many_lanes")
        # Without stream_id a create runs as on a connection without lanes.
        create(ws, input="plain [[sim tokens=3]]")
        plain = read_until(ws, lambda f: ends(f, None) == 1)
        mine = lane(plain, None)
        check_stream(mine)
        validate_ws_frames(mine)
        assert sim.stats()["streams_aborted"] == 0
    assert wait_for(lambda: sim.stats()["streams_aborted"] == 2, within=20), sim.stats()
    assert wait_for(lambda: sim.stats()["active_streams"] == 0, within=20), sim.stats()


def test_a_lane_forks_from_a_store_false_response_made_on_another(
        proxy: ServerProcess, sim: SimControl) -> None:
    with socket(proxy) as ws:
        create(ws, "main", input="remember the word heron")
        made = read_until(ws, lambda f: ends(f, "main") == 1)[-1]
        assert made["type"] == "response.completed"
        create(ws, "fork", input="which word?", previous_response_id=made["response"]["id"])
        forked = read_until(ws, lambda f: ends(f, "fork") == 1)
    validate_ws_frames(forked)
    assert forked[-1]["type"] == "response.completed"
    assert forked[-1]["response"]["previous_response_id"] == made["response"]["id"]
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


def test_error_frames_are_the_packages_error_event_and_echo_the_lane(
        proxy: ServerProcess) -> None:
    with socket(proxy) as ws:
        create(ws, "e", input="x", previous_response_id="resp_0000nothere")
        create(ws, "e", input="x", background=True)
        create(ws, "e", input="x" * 9000)  # over --max-body-bytes: the frame is not read
        ws.send("{not json")
        create(ws, 5, input="x")  # type: ignore[arg-type]
        frames = read_until(ws, lambda f: len(f) == 5)
        # The lane's create still runs after its errors.
        create(ws, "e", input="after [[sim tokens=2]]")
        after = read_until(ws, lambda f: ends(f, "e") == 1)
    validate_ws_frames(frames + after)
    summary = sorted((f.get("stream_id") or "", f["status"], f["error"]["param"] or "",
                      f["error"]["code"] or "") for f in frames)
    assert summary == sorted([
        ("", 400, "", "invalid_json"),
        ("", 400, "stream_id", ""),
        ("", 413, "", "frame_too_large"),
        ("e", 400, "background", ""),
        ("e", 400, "previous_response_id", "previous_response_not_found"),
    ])
    assert after[-1]["type"] == "response.completed" and after[-1]["stream_id"] == "e"


def test_max_age_ends_every_lane(short_lived: ServerProcess, sim: SimControl) -> None:
    with socket(short_lived) as ws:
        create(ws, "p", input=STALLED)
        create(ws, "q", input=STALLED)
        frames = read_until(ws, lambda f: f[-1]["type"] == "error")
        validate_ws_frames(frames)
        assert frames[-1]["error"]["code"] == "websocket_connection_limit_reached"
        # Both had reached the fleet (a delta each) before the connection's end.
        assert {f.get("stream_id") for f in frames
                if f["type"] == "response.output_text.delta"} == {"p", "q"}
        assert "stream_id" not in frames[-1]  # about the connection, not a lane
    assert wait_for(lambda: sim.stats()["streams_aborted"] == 2, within=20), sim.stats()


_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)


# The SDK opens its socket without websockets' context manager (its own warning, not ours).
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_sdks_websocket_client_runs_two_lanes_on_one_connection(
        proxy: ServerProcess) -> None:
    """`AsyncOpenAI().responses.connect()` with `stream_id` on `connection.response.create`:
    each frame parses as the package's server events, each lane's events carry its
    `stream_id` and count their own `sequence_number`s from 0."""

    async def run() -> dict[str, list[tuple[Any, dict[str, Any]]]]:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
        by_lane: dict[str, list[tuple[Any, dict[str, Any]]]] = {"left": [], "right": []}
        async with client, client.responses.connect(max_retries=0) as connection:
            await connection.response.create(model="sim-model", store=False,
                                             input="left words [[sim tokens=8]]",
                                             stream_id="left")
            await connection.response.create(model="sim-model", store=False,
                                             input="right words [[sim tokens=5]]",
                                             stream_id="right")
            ended = 0
            for _ in range(500):
                raw = await connection.recv_bytes()
                _EVENTS.validate_json(raw, strict=True)
                event = connection.parse_event(raw)
                assert event.type != "error", event
                assert event.stream_id in by_lane, event
                by_lane[event.stream_id].append((event, json.loads(raw)))
                ended += event.type in TERMINAL
                if ended == 2:
                    break
        return by_lane

    by_lane = asyncio.run(asyncio.wait_for(run(), 60))
    finals = set()
    for events in by_lane.values():
        parsed = [event for event, _ in events]
        assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
        assert parsed[0].type == "response.created"
        assert parsed[-1].type == "response.completed"
        check_stream([frame for _, frame in events])
        finals.add(parsed[-1].response.id)
    assert len(finals) == 2
