"""`/readyz`: a bare public answer, detail behind a key, and a report of any background loop
that crashed (the loops are supervised: logged, restarted with a bounded backoff)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.services.process.loops import LoopSupervisor
from proxy.settings import Settings
from tests.support.inprocess import app_for, until
from tests.support.servers import free_port


async def test_the_public_probe_names_no_upstream_and_no_error_text(settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with app_for(settings.replace(upstreams=(dead,))) as (client, _):
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "not ready", "reasons": ["upstreams"]}
        assert "127.0.0.1" not in ready.text


async def test_the_detail_needs_a_valid_key(settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    keyed = settings.replace(upstreams=(dead,), api_keys=("k1",))
    async with app_for(keyed) as (client, _):
        for headers in ({}, {"authorization": "Bearer wrong"}):
            bare = await client.get("/readyz", headers=headers)
            assert bare.status_code == 503 and set(bare.json()) == {"status", "reasons"}
        detailed = await client.get("/readyz", headers={"authorization": "Bearer k1"})
        assert detailed.status_code == 503
        assert [u["url"] for u in detailed.json()["upstreams"]] == [dead]


async def test_a_crashed_discovery_loop_is_reported_then_restarted(settings: Settings,
                                                                   monkeypatch: Any) -> None:
    async with app_for(settings.replace(discovery_interval=0.05)) as (client, runtime):
        assert (await client.get("/readyz")).status_code == 200
        healthy_refresh = runtime.fleet.refresh

        async def broken() -> None:
            raise RuntimeError("a bug in discovery")

        monkeypatch.setattr(runtime.fleet, "refresh", broken)

        async def reported() -> bool:
            ready = await client.get("/readyz")
            return ready.status_code == 503 and ready.json()["reasons"] == ["loops"]

        await until(reported)
        monkeypatch.setattr(runtime.fleet, "refresh", healthy_refresh)

        async def recovered() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await until(recovered)
        assert runtime.process.supervisor.restarts >= 1


async def test_a_crashed_job_take_loop_restarts_and_jobs_still_run(settings: Settings,
                                                                    monkeypatch: Any) -> None:
    async with app_for(settings) as (client, runtime):
        assert runtime.process.worker is not None
        real_take = runtime.queue.take
        calls = 0

        async def take_once_broken(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug in take")
            return await real_take(*args, **kwargs)

        monkeypatch.setattr(runtime.queue, "take", take_once_broken)
        runtime.process.worker.poke()
        await until(lambda: _true_if(calls >= 1))
        made = await client.post("/v1/responses", json={"model": "sim-model", "input": "hi",
                                                        "background": True})
        assert made.status_code == 200, made.text

        async def done() -> bool:
            got = await client.get(f"/v1/responses/{made.json()['id']}")
            return bool(got.json()["status"] == "completed")

        await until(done)
        assert runtime.process.supervisor.restarts >= 1


async def _true_if(value: bool) -> bool:
    return value


async def test_the_supervisor_backs_off_and_lets_a_returning_loop_end() -> None:
    supervisor = LoopSupervisor(first_delay=0.01, max_delay=0.04)
    runs = 0
    ended = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 4:
            raise ValueError("boom")
        ended.set()

    task = supervisor.start("flaky", flaky)
    await asyncio.wait_for(ended.wait(), 5)
    await asyncio.wait_for(task, 5)
    assert runs == 4 and supervisor.restarts == 3 and supervisor.failing() == []

    async def forever() -> None:
        raise KeyError("always")

    doomed = supervisor.start("doomed", forever)
    await until(lambda: _true_if(supervisor.failing() == ["doomed"]))
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
