"""No turn ends stuck: faults injected at the store level (the in-process app, the embedded
store, the simulator upstream). Each test fails on a store that loses the final write, a reply
lost after the write was applied, a dropped event-log flush, or an early job acknowledgement."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from proxy.core.errors import StoreUnavailable
from proxy.core.policy.tenancy import tenant_of
from proxy.services.eventlog import durable
from proxy.settings import Settings
from proxy.store.base import ResponseRecord, StoredEvent
from tests.support.assembly import assemble, golden_bytes
from tests.support.inprocess import app_for, until
from tests.support.spies import first_args

ASK = {"model": "sim-model", "input": "hello there"}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durable, "RETRY_DELAYS", (0.01, 0.01, 0.01, 0.01, 0.01))






def failing_first(real: Callable[..., Awaitable[Any]], times: int, *,
                  after_applying: bool = False) -> Callable[..., Awaitable[Any]]:
    """`real`, failing its first `times` calls; `after_applying`: the call lands in the store
    and only its reply is lost (a timeout after the write)."""
    left = [times]

    async def call(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            if after_applying:
                await real(*args, **kwargs)
            raise StoreUnavailable("injected")
        return await real(*args, **kwargs)

    return call


def sse_events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: ")]


async def test_a_failed_final_write_is_retried_until_the_object_is_final(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(settings) as (client, runtime):
        store = runtime.store
        monkeypatch.setattr(store, "finish_response", failing_first(store.finish_response, 3))
        made = await client.post("/v1/responses", json=ASK)
        assert made.status_code == 200, made.text
        got = await client.get(f"/v1/responses/{made.json()['id']}")
        assert got.json()["status"] == "completed"


async def test_a_final_write_applied_but_unanswered_still_extends_the_conversation(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(settings) as (client, runtime):
        conversation = (await client.post("/v1/conversations", json={})).json()["id"]
        store = runtime.store
        monkeypatch.setattr(store, "finish_response",
                            failing_first(store.finish_response, 1, after_applying=True))
        monkeypatch.setattr(store, "add_conversation_items",
                            failing_first(store.add_conversation_items, 2))
        made = await client.post("/v1/responses", json={**ASK, "conversation": conversation})
        assert made.status_code == 200, made.text
        items = (await client.get(f"/v1/conversations/{conversation}/items",
                                  params={"order": "asc"})).json()["data"]
        assert [i["role"] for i in items] == ["user", "assistant"]


async def test_a_failed_log_flush_is_retried_so_the_replay_equals_the_stream(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(settings) as (client, runtime):
        store = runtime.store
        monkeypatch.setattr(store, "append_events", failing_first(store.append_events, 2))
        live = await client.post("/v1/responses", json={
            **ASK, "stream": True, "input": "count [[sim tokens=30]]"})
        sent = sse_events(live.content)
        replay = await client.get(f"/v1/responses/{sent[0]['response']['id']}",
                                  params={"stream": "true"})
        assert sse_events(replay.content) == sent


async def test_a_log_with_a_gap_replays_rebuilt_from_the_final_object(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(settings) as (client, runtime):
        store = runtime.store

        async def lost(*args: Any, **kwargs: Any) -> None:
            raise StoreUnavailable("injected: every flush fails")

        monkeypatch.setattr(store, "append_events", lost)
        live = await client.post("/v1/responses", json={
            **ASK, "stream": True, "input": "count [[sim tokens=30]]"})
        sent = sse_events(live.content)
        # the log holds the start event and the terminal one, nothing between
        replay = await client.get(f"/v1/responses/{sent[0]['response']['id']}",
                                  params={"stream": "true"})
        rebuilt = sse_events(replay.content)
        assert [e["sequence_number"] for e in rebuilt] == list(range(len(rebuilt)))
        assert rebuilt[-1]["type"] == "response.completed"
        assert rebuilt[-1]["response"]["output"] == sent[-1]["response"]["output"]


async def test_a_job_is_not_acknowledged_until_its_end_is_stored(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(settings.replace(heartbeat_interval=0.2)) as (client, runtime):
        store, queue = runtime.store, runtime.queue
        real_finish = store.finish_response
        outage = [True]
        attempts = [0]

        async def finish(*args: Any, **kwargs: Any) -> Any:
            if outage[0]:
                attempts[0] += 1
                raise StoreUnavailable("injected")
            return await real_finish(*args, **kwargs)

        monkeypatch.setattr(store, "finish_response", finish)
        acked = first_args(monkeypatch, queue, "done")
        made = await client.post("/v1/responses", json={**ASK, "background": True})
        response_id = made.json()["id"]
        worker = runtime.process.worker
        assert worker is not None

        async def gave_up() -> bool:
            return attempts[0] >= len(durable.RETRY_DELAYS) + 1 and worker.running == 0

        await until(gave_up, interval=0.02)
        assert acked == []  # the end is not stored: the entry stays for a reclaim
        outage[0] = False

        async def settled() -> bool:
            got = (await client.get(f"/v1/responses/{response_id}")).json()
            return got["status"] not in ("queued", "in_progress") and bool(acked)

        # Reclaimed: closed (failed, never stuck) and only then acked.
        await until(settled, interval=0.02)


def test_reconcile_takes_only_our_own_object_as_our_write() -> None:
    from proxy.store.base import Transition

    ours = {"id": "resp_1", "status": "completed", "output": [{"id": "msg_1"}]}
    landed = durable.reconcile(Transition(False, dict(ours)), ours)
    assert landed.changed and landed.response == ours
    cancelled = {**ours, "status": "cancelled"}
    other = durable.reconcile(Transition(False, cancelled), ours)
    assert not other.changed and other.response == cancelled
    assert not durable.reconcile(Transition(False, None), ours).changed


async def test_retries_are_bounded_and_only_for_an_unavailable_store() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise StoreUnavailable("down")

    with pytest.raises(StoreUnavailable):
        await durable.retried("test", down, delays=(0, 0, 0))
    assert calls == 4

    async def bug() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not transient")

    calls = 0
    with pytest.raises(ValueError):
        await durable.retried("test", bug, delays=(0, 0, 0))
    assert calls == 1


async def test_a_follower_gets_the_end_of_a_response_finished_without_its_terminal_event(
        settings: Settings) -> None:
    """A follower tailing a log whose writer stored the final object but never its terminal
    event (its log flush was given up) must not see the stream end as if whole: after
    `follow_idle` it reads the final object and sends its terminal event, numbered next."""

    live = assemble(golden_bytes("text"))
    prefix = live[: len(live) // 2]
    async with app_for(settings.replace(follow_idle=0.3)) as (client, runtime):
        store = runtime.store
        record = ResponseRecord(dict(prefix[1]["response"]), tenant_of("sk-test"), logged=True)
        await store.create_response(record, [], ttl=60, event_ttl=60, events=[
            StoredEvent(e["sequence_number"], e["type"], orjson.dumps(e)) for e in prefix])
        follower = client.get(f"/v1/responses/{record.id}", params={"stream": "true"},
                              headers={"authorization": "Bearer sk-test"})
        reading = asyncio.ensure_future(follower)
        await asyncio.sleep(0.1)
        await store.finish_response(live[-1]["response"], None, tenant=tenant_of("sk-test"),
                                    ttl=60, event_ttl=60)
        got = sse_events((await reading).content)
    assert got[: len(prefix)] == prefix
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    assert got[-1]["type"] == "response.completed"
    assert got[-1]["response"]["output"] == live[-1]["response"]["output"]
