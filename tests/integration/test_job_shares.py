"""Each key's share of the background job queue, through the app in-process (embedded store, the
simulator, no worker: what is queued stays queued): a key at `--max-queued-jobs` gets 429 with
Retry-After while another key still queues, and a vector store add queues each file once
(the queue itself: tests/contract/test_jobqueue_contract.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from proxy.app import create_app
from proxy.core.policy.keysfile import parse_keys_file
from proxy.settings import Settings
from tests.support.servers import ServerProcess

SHARE = 3
KEYS = parse_keys_file({"keys": [{"key": "sk-a"}, {"key": "sk-b"}]})


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
async def app(simulator: ServerProcess) -> AsyncIterator[Starlette]:
    made = create_app(Settings.of(upstreams=(simulator.url,), keys_file=KEYS, run_jobs=False,
                                  max_queued_jobs=SHARE, max_queued_jobs_total=10 * SHARE))
    async with made.router.lifespan_context(made):
        yield made


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                 timeout=30) as client:
        yield client


async def queued(app: Starlette) -> int:
    return int(await app.state.runtime.queue.length())


def background(text: str = "hi") -> dict[str, Any]:
    return {"model": "sim-model", "input": text, "background": True}


async def upload(http: httpx.AsyncClient, key: str, name: str = "a.txt") -> str:
    answer = await http.post("/v1/files", files={"file": (name, b"some text to index")},
                             data={"purpose": "assistants"}, headers=auth(key))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


async def new_store(http: httpx.AsyncClient, key: str) -> str:
    answer = await http.post("/v1/vector_stores", json={"name": "s"}, headers=auth(key))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


async def test_a_key_at_its_share_gets_429_and_another_key_still_queues(
        app: Starlette, http: httpx.AsyncClient) -> None:
    for n in range(SHARE):
        made = await http.post("/v1/responses", json=background(f"a{n}"), headers=auth("sk-a"))
        assert made.status_code == 200 and made.json()["status"] == "queued", made.text
    refused = await http.post("/v1/responses", json=background(), headers=auth("sk-a"))
    assert refused.status_code == 429
    other = await http.post("/v1/responses", json=background(), headers=auth("sk-b"))
    assert other.status_code == 200 and other.json()["status"] == "queued", other.text
    assert await queued(app) == SHARE + 1
    assert int(refused.headers["retry-after"]) > 0
    error = refused.json()["error"]
    assert error["type"] == error["code"] == "rate_limit_exceeded"
    assert "--max-queued-jobs" in error["message"] and set(error) >= {"message", "param"}


async def test_ingestion_counts_in_the_same_share(app: Starlette,
                                                  http: httpx.AsyncClient) -> None:
    store = await new_store(http, "sk-a")
    for n in range(SHARE):
        file_id = await upload(http, "sk-a", f"f{n}.txt")
        added = await http.post(f"/v1/vector_stores/{store}/files", json={"file_id": file_id},
                                headers=auth("sk-a"))
        assert added.status_code == 200 and added.json()["status"] == "in_progress"
    refused = await http.post("/v1/responses", json=background(), headers=auth("sk-a"))
    assert refused.status_code == 429 and "retry-after" in refused.headers
    other = await http.post("/v1/responses", json=background(), headers=auth("sk-b"))
    assert other.status_code == 200, other.text
    assert await queued(app) == SHARE + 1


@pytest.mark.parametrize("form", ["file_ids", "files"])
async def test_a_batch_repeating_one_file_1000_times_queues_one_job(
        app: Starlette, http: httpx.AsyncClient, form: str) -> None:
    store = await new_store(http, "sk-a")
    file_id = await upload(http, "sk-a")
    body = ({"file_ids": [file_id] * 1000} if form == "file_ids"
            else {"files": [{"file_id": file_id}] * 1000})
    batch = await http.post(f"/v1/vector_stores/{store}/file_batches", json=body,
                            headers=auth("sk-a"))
    assert batch.status_code == 200, batch.text
    assert batch.json()["file_counts"]["total"] == 1
    assert await queued(app) == 1
    # The same file again, as it is being ingested: nothing more is queued.
    again = await http.post(f"/v1/vector_stores/{store}/file_batches", json=body,
                            headers=auth("sk-a"))
    assert again.status_code == 200 and again.json()["file_counts"]["total"] == 1
    single = await http.post(f"/v1/vector_stores/{store}/files", json={"file_id": file_id},
                             headers=auth("sk-a"))
    assert single.status_code == 200 and single.json()["status"] == "in_progress"
    assert await queued(app) == 1
    # New attributes are new work: that file is ingested again.
    changed = await http.post(f"/v1/vector_stores/{store}/files",
                              json={"file_id": file_id, "attributes": {"v": 2}},
                              headers=auth("sk-a"))
    assert changed.status_code == 200 and changed.json()["attributes"] == {"v": 2}
    assert await queued(app) == 2


async def test_a_batch_larger_than_what_is_left_of_the_share_is_refused_whole(
        app: Starlette, http: httpx.AsyncClient) -> None:
    store = await new_store(http, "sk-a")
    assert (await http.post("/v1/responses", json=background(),
                            headers=auth("sk-a"))).status_code == 200
    file_ids = [await upload(http, "sk-a", f"f{n}.txt") for n in range(SHARE)]
    refused = await http.post(f"/v1/vector_stores/{store}/file_batches",
                              json={"file_ids": file_ids}, headers=auth("sk-a"))
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    # Nothing was stored: no file entered the store, nothing more was queued.
    files = await http.get(f"/v1/vector_stores/{store}/files", headers=auth("sk-a"))
    assert files.status_code == 200 and files.json()["data"] == []
    assert await queued(app) == 1
    fits = await http.post(f"/v1/vector_stores/{store}/file_batches",
                           json={"file_ids": file_ids[:SHARE - 1]}, headers=auth("sk-a"))
    assert fits.status_code == 200 and fits.json()["file_counts"]["in_progress"] == SHARE - 1
    assert await queued(app) == SHARE


async def test_a_batch_larger_than_a_whole_share_is_a_400_naming_it(
        app: Starlette, http: httpx.AsyncClient) -> None:
    store = await new_store(http, "sk-a")
    file_ids = [await upload(http, "sk-a", f"f{n}.txt") for n in range(SHARE + 1)]
    answer = await http.post(f"/v1/vector_stores/{store}/file_batches",
                             json={"files": [{"file_id": f} for f in file_ids]},
                             headers=auth("sk-a"))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "files"
    assert await queued(app) == 0


# -- fairness through the worker ---------------------------------------------------------

async def status_of(http: httpx.AsyncClient, key: str, response_id: str) -> str:
    got = await http.get(f"/v1/responses/{response_id}", headers=auth(key))
    return str(got.json()["status"])


async def until_status(http: httpx.AsyncClient, key: str, response_id: str,
                       statuses: set[str]) -> None:
    for _ in range(300):  # at most ~15 s
        if await status_of(http, key, response_id) in statuses:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{response_id} never reached {statuses}")


@pytest.fixture
async def worked(simulator: ServerProcess) -> AsyncIterator[tuple[Starlette, list[str]]]:
    """An app whose in-process worker runs one job at a time (W = 1); the second item lists
    the response ids its takes handed out, in order."""
    made = create_app(Settings.of(upstreams=(simulator.url,), keys_file=KEYS,
                                  worker_concurrency=1, max_queued_jobs=100,
                                  max_queued_jobs_total=1000))
    async with made.router.lifespan_context(made):
        queue = made.state.runtime.queue
        taken: list[str] = []
        take = queue.take

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            jobs = await take(*args, **kwargs)
            taken.extend(job.response_id for job in jobs)
            return jobs

        queue.take = recorded  # the worker looks it up on every take
        yield made, taken


async def test_a_keys_job_runs_next_after_the_running_one_not_after_another_keys_backlog(
        worked: tuple[Starlette, list[str]]) -> None:
    app, taken = worked
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                 timeout=30) as http:
        async def submit(key: str, text: str) -> str:
            made = await http.post("/v1/responses", json=background(text), headers=auth(key))
            assert made.status_code == 200, made.text
            return str(made.json()["id"])

        # A's first job holds the only slot until it is cancelled: everything below is queued
        # while it runs, whatever the timing.
        first = await submit("sk-a", "long [[sim tokens=2000 delay_ms=10]]")
        await until_status(http, "sk-a", first, {"in_progress"})
        backlog = [await submit("sk-a", f"a{n}") for n in range(8)]
        other = await submit("sk-b", "b")
        assert taken == [first]
        assert (await http.post(f"/v1/responses/{first}/cancel",
                                headers=auth("sk-a"))).status_code == 200
        await until_status(http, "sk-b", other, {"completed"})
        # W = 1: B's job is taken within 2 x W takes of A's running one (FIFO: after all 8).
        assert other in taken[1:3], taken
        await until_status(http, "sk-a", backlog[-1], {"completed"})
        assert sorted(taken) == sorted([first, *backlog, other])
