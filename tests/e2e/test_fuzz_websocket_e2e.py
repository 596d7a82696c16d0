"""The quick fuzz profile's WebSocket part: generated frames (create
bodies from the Responses schema, mutated; non-JSON, binary, wrong types, unknown types,
frames over the size limit) over a real socket to a real `serve` process with a real Redis.
Every error frame in OpenAI's shape with a status under 500, no server error in any stream,
no write to Redis by a rejected frame, the socket still serving and `/healthz` fine after.
`make fuzz` runs the same for minutes (tests/fuzz/__main__.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from tests.fuzz import harness
from tests.fuzz import strategies as s
from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

KEY = "sk-fuzz-ws"
LIMIT = 1 << 17  # frames past twice this close the socket (uvicorn); the strategies stay under
FRAMES = 120


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY, "--max-body-bytes", str(LIMIT),
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/6")
    yield server
    server.stop()


@pytest.mark.timeout(240)
def test_generated_frames_get_events_or_error_frames(proxy: ServerProcess,
                                                     redis_server: ServerProcess) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    writes = harness.Writes(f"redis://127.0.0.1:{redis_server.port}/6")
    tally = harness.Tally()
    try:
        with httpx.Client(base_url=proxy.url, timeout=60) as http:
            known = harness.make_known(http, KEY)
            url = proxy.url.replace("http://", "ws://") + "/v1/responses"
            with connect(url, additional_headers=auth, open_timeout=10, close_timeout=5,
                         max_size=None) as ws:
                harness.run_cases(s.ws_frames(known, LIMIT),
                                  harness.ws_checker(ws, writes, tally, "ws"), examples=FRAMES)
                # The same socket still serves a plain create to its end.
                events = harness.ws_exchange(ws, json.dumps({
                    "type": "response.create", "model": s.MODEL, "input": "still there?"}))
                assert events[-1]["type"] == "response.completed", events[-1]
            harness.assert_healthy(http)
    finally:
        writes.close()
    assert tally.total == FRAMES
    assert sum(tally.rejected.values()) > 0  # the Redis check ran (accepted ones: above)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("binary", [False, True])
def test_a_frame_over_the_limit_that_is_not_json_gets_its_one_error(
        proxy: ServerProcess, binary: bool) -> None:
    """The frame the generated run drew with `--hypothesis-seed=379` (a create body past
    `--max-body-bytes` with trailing garbage): answered by `frame_too_large` alone (the size is
    judged before the parse), then the sentinel's `invalid_json`; the exchange reads both and
    stops, where it once waited out its 60 s for a second `invalid_json`."""
    body = json.dumps({"type": "response.create", "model": s.MODEL, "input": "x" * LIMIT})
    frame: str | bytes = body + "\x12;"
    if binary:
        frame = frame.encode()
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"authorization": f"Bearer {KEY}"}, open_timeout=10,
                 close_timeout=5, max_size=None) as ws:
        received = harness.ws_exchange(ws, frame, timeout=15)
        assert [m["error"]["code"] for m in received] == ["frame_too_large", "invalid_json"]
        events = harness.ws_exchange(ws, json.dumps({
            "type": "response.create", "model": s.MODEL, "input": "still there?"}))
        assert events[-1]["type"] == "response.completed", events[-1]
