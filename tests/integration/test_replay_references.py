"""Replays of stored streams whose logs hold events by reference (proxy/store/keys.py, "the event
log's references") are byte-identical to what the client was sent live, for every way a
response ends (foreground completed, incomplete and failed; background completed and
cancelled), from the start and with `starting_after` 0, 1, 2 and the last event: the session's
real redis-server, the in-process app and the simulator. Every event is also valid for the
openai package."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy.settings import Settings
from proxy.store import keys
from proxy.store.redis import RedisStore
from tests.support.conformance import validate_with_sdk
from tests.support.inprocess import app_for, until
from tests.support.servers import ServerProcess


def data_lines(body: bytes) -> list[bytes]:
    """The SSE `data:` payloads as sent, byte for byte."""
    return [line[6:] for line in body.splitlines() if line.startswith(b"data: ")]


@pytest.fixture
def shared(simulator: ServerProcess, redis_server: ServerProcess) -> Settings:
    return Settings.of(upstreams=(simulator.url,),
                       redis_url=f"redis://127.0.0.1:{redis_server.port}/0")


async def references(store: RedisStore, rid: str) -> tuple[bool, bool]:
    """Whether the log holds the head, the terminal, by reference."""
    entries = await store.client.xrange(keys.response_log(rid))
    return (any(keys.E_HEAD in fields for _id, fields in entries),
            any(keys.E_FINAL in fields for _id, fields in entries))


async def assert_replays_equal(http: Any, rid: str, sent: list[bytes]) -> None:
    last = orjson.loads(sent[-1])["sequence_number"]
    for after in (None, 0, 1, 2, last):
        params = {"stream": "true"} | ({} if after is None else {"starting_after": str(after)})
        replay = await http.get(f"/v1/responses/{rid}", params=params)
        assert replay.status_code == 200
        start = 0 if after is None else after + 1
        assert data_lines(replay.content) == sent[start:], after


@pytest.mark.parametrize(("prompt", "extra", "status"), [
    ("hi [[sim tokens=8]]", {}, "completed"),
    ("be long [[sim tokens=64]]", {"max_output_tokens": 16}, "incomplete"),
    ("cut me [[sim tokens=8 fail=error:3]]", {}, "failed"),
], ids=["completed", "incomplete", "failed"])
async def test_a_foreground_replay_is_byte_identical_to_the_live_stream(
        shared: Settings, prompt: str, extra: dict[str, Any], status: str) -> None:
    async with app_for(shared) as (http, runtime):
        live = await http.post("/v1/responses", json={
            "model": "sim-model", "input": prompt, "stream": True, **extra})
        sent = data_lines(live.content)
        events = [orjson.loads(line) for line in sent]
        validate_with_sdk(events)
        assert events[-1]["response"]["status"] == status
        rid = events[0]["response"]["id"]
        # a short answer's final write carried the whole log: both kinds of reference made
        assert await references(runtime.store, rid) == (True, True)
        await assert_replays_equal(http, rid, sent)


async def test_a_background_replay_is_byte_identical_to_the_live_stream(
        shared: Settings) -> None:
    async with app_for(shared) as (http, runtime):
        live = await http.post("/v1/responses", json={
            "model": "sim-model", "input": "hi [[sim tokens=8]]", "stream": True,
            "background": True}, timeout=60)
        sent = data_lines(live.content)
        events = [orjson.loads(line) for line in sent]
        validate_with_sdk(events)
        assert events[-1]["type"] == "response.completed"
        rid = events[0]["response"]["id"]
        # the queued created event and the worker's in_progress differ from any kept object
        assert (await references(runtime.store, rid))[0] is False
        await assert_replays_equal(http, rid, sent)


async def test_a_cancelled_background_replay_is_byte_identical_to_the_live_stream(
        shared: Settings) -> None:
    async with app_for(shared) as (http, runtime):
        submitted = await http.post("/v1/responses", json={
            "model": "sim-model", "input": "cancel me [[sim tokens=2000 delay_ms=20]]",
            "background": True})
        rid = submitted.json()["id"]
        watch = asyncio.create_task(http.get(f"/v1/responses/{rid}",
                                             params={"stream": "true"}, timeout=60))

        async def streaming() -> bool:
            return len(await runtime.store.read_events(rid)) > 4

        await until(streaming, interval=0.02)
        cancelled = await http.post(f"/v1/responses/{rid}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        sent = data_lines((await watch).content)
        events = [orjson.loads(line) for line in sent]
        validate_with_sdk(events)
        assert events[-1]["type"] == "response.cancelled"
        await assert_replays_equal(http, rid, sent)
