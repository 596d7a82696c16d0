"""`/metrics`: prometheus_client's exposition of one app's registry, read back with
prometheus_client's parser after known traffic: counts match what was sent, ids never become
labels, two apps in one process count apart, states are read when scraped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.metrics import MetricWrapperBase

from proxy.app import create_app
from proxy.core.errors import StoreUnavailable
from proxy.runtime import Runtime
from proxy.services.eventlog.pages import whole_log
from proxy.settings import Settings
from proxy.telemetry.metrics import JOB_OUTCOMES, LIMIT_REASONS, METHODS, Metrics
from tests.support.prom import Scrape, parse
from tests.support.sse import data_payloads

Client = tuple[httpx.AsyncClient, Runtime]
RESPONSES = "/v1/responses"
ONE_RESPONSE = "/v1/responses/{response_id}"
CHAT = "/v1/chat/completions"

FAMILIES = {
    "proxy_requests": "counter",
    "proxy_request_duration_seconds": "histogram",
    "proxy_ttft_seconds": "histogram",
    "proxy_tokens": "counter",
    "proxy_responses": "counter",
    "proxy_open_streams": "gauge",
    "proxy_upstream_up": "gauge",
    "proxy_upstream_in_flight": "gauge",
    "proxy_jobs_queued": "gauge",
    "proxy_event_loop_tasks": "gauge",
    "proxy_jobs": "counter",
    "proxy_cache_requests": "counter",
    "proxy_cache_lookup_seconds": "histogram",
    "proxy_store_errors": "counter",
    "proxy_overhead_seconds": "histogram",
    "proxy_rate_limited": "counter",
}


@pytest.fixture
async def app_client(simulator: Any) -> AsyncIterator[Client]:
    app = create_app(Settings.of(upstreams=(simulator.url,), cache_mode="exact"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http, app.state.runtime


async def scrape(http: httpx.AsyncClient) -> Scrape:
    reply = await http.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(reply.text)


async def idle(runtime: Runtime) -> None:
    """Wait (bounded) for the work spawned after answers (cache writes, job acks)."""
    for _ in range(300):
        process = runtime.process
        if not len(process.tasks) and (process.worker is None or not process.worker.running):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("background work did not finish")


def usage_of(response: dict[str, Any]) -> tuple[int, int]:
    usage = response["usage"]
    return int(usage["input_tokens"]), int(usage["output_tokens"])


async def test_mixed_traffic_is_counted_family_by_family(app_client: Client) -> None:
    http, runtime = app_client
    polls = 0
    tokens = [0, 0]

    def spent(response: dict[str, Any]) -> None:
        seen = usage_of(response)
        tokens[0] += seen[0]
        tokens[1] += seen[1]

    # 1. JSON, stored: a cache miss, a generation
    body = {"model": "sim-model", "input": "count me as json"}
    first = await http.post(RESPONSES, json=body)
    assert first.status_code == 200 and first.headers["x-proxy-cache"] == "miss"
    spent(first.json())
    await idle(runtime)  # the cache write
    # 2. the same again: a cache hit (a completed Response, no fleet tokens)
    hit = await http.post(RESPONSES, json=body)
    assert hit.headers["x-proxy-cache"] == "hit"
    # 3. SSE: a miss, a generation, a stream
    streamed = await http.post(RESPONSES, json={"model": "sim-model", "input": "count me as sse",
                                                "stream": True})
    assert streamed.status_code == 200
    spent(data_payloads(streamed.text)[-1]["response"])
    # 4. background: a bypass, then a job run by this app's worker
    job = await http.post(RESPONSES, json={"model": "sim-model", "input": "count me later",
                                           "background": True})
    assert job.status_code == 200
    job_id = job.json()["id"]
    for _ in range(200):
        polls += 1
        state = (await http.get(f"{RESPONSES}/{job_id}")).json()
        if state["status"] == "completed":
            break
        await asyncio.sleep(0.02)
    assert state["status"] == "completed"
    spent(state)
    # 5. a chat pass-through (through the cache: a miss)
    chat = await http.post(CHAT, json={"model": "sim-model",
                                       "messages": [{"role": "user", "content": "pass me"}]})
    assert chat.status_code == 200
    # 6. errors: an unknown id, a refused body
    assert (await http.get(f"{RESPONSES}/resp_missing")).status_code == 404
    assert (await http.post(RESPONSES, json={"model": "sim-model"})).status_code == 400
    # 7. a stored replay (a stream on the item route)
    replay = await http.get(f"{RESPONSES}/{first.json()['id']}", params={"stream": "true"})
    assert replay.status_code == 200
    assert data_payloads(replay.text)[-1]["type"] == "response.completed"
    await idle(runtime)

    seen = await scrape(http)
    for family, kind in FAMILIES.items():
        assert seen.types.get(family) == kind, family
    requests = "proxy_requests_total"
    assert seen.value(requests, route=RESPONSES, method="POST", status="200") == 4
    assert seen.value(requests, route=RESPONSES, method="POST", status="400") == 1
    assert seen.value(requests, route=CHAT, method="POST", status="200") == 1
    assert seen.value(requests, route=ONE_RESPONSE, method="GET", status="404") == 1
    assert seen.value(requests, route=ONE_RESPONSE, method="GET", status="200") == polls + 1
    duration = "proxy_request_duration_seconds_count"
    assert seen.value(duration, route=RESPONSES) == 5
    assert seen.value(duration, route=CHAT) == 1
    assert seen.value(duration, route=ONE_RESPONSE) == polls + 2
    # time to first byte: streams only (the SSE create and the replay)
    assert seen.value("proxy_ttft_seconds_count", route=RESPONSES) == 1
    assert seen.value("proxy_ttft_seconds_count", route=ONE_RESPONSE) == 1
    assert seen.value("proxy_ttft_seconds_count", route=CHAT) is None
    assert seen.value("proxy_open_streams", route=RESPONSES) == 0
    assert seen.value("proxy_open_streams", route=ONE_RESPONSE) == 0
    # the proxy's own time: only requests that sent a generation upstream from the handler
    # (JSON, SSE, chat), not the hit, the background submit or the refused body
    assert seen.value("proxy_overhead_seconds_count", route=RESPONSES) == 2
    assert seen.value("proxy_overhead_seconds_count", route=CHAT) == 1
    assert seen.value("proxy_responses_total", status="completed") == 4
    assert seen.value("proxy_tokens_total", direction="input") == tokens[0] > 0
    assert seen.value("proxy_tokens_total", direction="output") == tokens[1] > 0
    assert seen.value("proxy_jobs_total", outcome="completed") == 1
    for outcome in JOB_OUTCOMES:
        if outcome != "completed":
            assert seen.value("proxy_jobs_total", outcome=outcome) == 0
    assert seen.value("proxy_jobs_queued") == 0  # acknowledged: no longer in the queue
    cache = "proxy_cache_requests_total"
    assert seen.value(cache, route="responses", result="miss") == 2
    assert seen.value(cache, route="responses", result="hit") == 1
    assert seen.value(cache, route="responses", result="bypass") == 1
    assert seen.value(cache, route="chat", result="miss") == 1
    assert seen.value("proxy_cache_lookup_seconds_count") == 4  # a bypass looks nothing up
    assert seen.value("proxy_cache_writes_total", route="responses") == 2
    assert seen.value("proxy_upstream_up", replica="replica-1") == 1
    assert seen.value("proxy_upstream_in_flight", replica="replica-1") == 0
    assert seen.value("proxy_store_errors_total") == 0
    for reason in LIMIT_REASONS:
        assert seen.value("proxy_rate_limited_total", reason=reason) == 0


async def test_two_apps_in_one_process_count_apart(simulator: Any) -> None:
    settings = Settings.of(upstreams=(simulator.url,))
    apps = [create_app(settings), create_app(settings)]
    async with apps[0].router.lifespan_context(apps[0]), \
            apps[1].router.lifespan_context(apps[1]):
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy") for app in apps]
        async with clients[0], clients[1]:
            body = {"model": "sim-model", "input": "only here", "store": False}
            for _ in range(3):
                assert (await clients[0].post(RESPONSES, json=body)).status_code == 200
            busy, quiet = await scrape(clients[0]), await scrape(clients[1])
    assert busy.value("proxy_requests_total", route=RESPONSES, method="POST",
                      status="200") == 3
    assert busy.value("proxy_responses_total", status="completed") == 3
    assert quiet.value("proxy_requests_total", route=RESPONSES, method="POST",
                       status="200") is None
    assert quiet.value("proxy_responses_total", status="completed") is None
    assert quiet.value("proxy_tokens_total", direction="output") == 0


async def test_ids_and_odd_methods_never_become_labels(app_client: Client) -> None:
    http, _ = app_client
    for n in range(25):
        assert (await http.get(f"{RESPONSES}/resp_{n:04d}")).status_code == 404
        assert (await http.get(f"/nowhere/{n}")).status_code == 404
    await http.request("BREW", f"{RESPONSES}/resp_teapot")
    await http.request("PURGE", "/v1/models")
    seen = await scrape(http)
    series = seen.series("proxy_requests_total")
    assert {s["route"] for s in series} <= {RESPONSES, ONE_RESPONSE, "/v1/models", "unmatched"}
    assert {s["method"] for s in series} <= METHODS | {"other"}
    assert any(s["method"] == "other" for s in series)
    assert len(series) <= 6  # not one per id or path
    for (_, labels) in seen.samples:
        assert not any("resp_" in value or "nowhere" in value for _, value in labels)


async def test_a_routes_series_are_bound_once_not_looked_up_per_request(
        simulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each series a request records (its count, duration, time to first byte, open streams,
    overhead, the response's outcome and tokens) is bound to its labels on the route's first
    request: later requests call no `labels()`, each of which takes the family's lock and
    builds its key."""
    looked_up: list[str] = []
    labels = MetricWrapperBase.labels

    def counted(self: MetricWrapperBase, *values: Any, **named: Any) -> Any:
        looked_up.append(self._name)
        return labels(self, *values, **named)

    monkeypatch.setattr(MetricWrapperBase, "labels", counted)
    app = create_app(Settings.of(upstreams=(simulator.url,)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            bodies = [{"model": "sim-model", "input": "hi", "store": store, "stream": stream}
                      for store in (True, False) for stream in (True, False)]
            for body in bodies:  # each route, status and outcome seen once
                assert (await http.post(RESPONSES, json=body)).status_code == 200
            looked_up.clear()
            for body in bodies * 2:
                assert (await http.post(RESPONSES, json=body)).status_code == 200
    assert looked_up == []


async def test_a_store_failure_reaching_a_client_is_counted(
        app_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    http, runtime = app_client

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("injected")

    monkeypatch.setattr(runtime.store, "get_response", down)
    for _ in range(2):
        assert (await http.get(f"{RESPONSES}/resp_abc")).status_code == 503
    seen = await scrape(http)
    assert seen.value("proxy_store_errors_total") == 2
    assert seen.value("proxy_requests_total", route=ONE_RESPONSE, method="GET",
                      status="503") == 2


async def test_replica_states_are_read_when_scraped(simulator: Any) -> None:
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    app = create_app(Settings.of(upstreams=(simulator.url, dead)))
    async with app.router.lifespan_context(app):
        runtime: Runtime = app.state.runtime
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy") as http:
            seen = await scrape(http)
            # Replicas by their position: /metrics is public, their addresses are not.
            assert seen.value("proxy_upstream_up", replica="replica-1") == 1
            assert seen.value("proxy_upstream_up", replica="replica-2") == 0
            # a state change shows at the next scrape, with nothing updating the metrics
            runtime.fleet.replicas[0].in_flight += 2
            try:
                seen = await scrape(http)
            finally:
                runtime.fleet.replicas[0].in_flight -= 2
            assert seen.value("proxy_upstream_in_flight", replica="replica-1") == 2
            text = (await http.get("/metrics")).text
            assert "127.0.0.1" not in text and "http://" not in text


async def test_queue_depth_is_left_out_when_the_store_cannot_say() -> None:
    metrics = Metrics()

    async def down() -> int:
        raise StoreUnavailable("injected")

    async def never() -> int:
        await asyncio.Event().wait()
        return 0

    async def three() -> int:
        return 3

    metrics.watch_queue(three)
    assert parse((await metrics.render()).decode()).value("proxy_jobs_queued") == 3
    for failing in (down, never):  # `never` is cut by QUEUE_READ_SECONDS
        metrics.watch_queue(failing)
        seen = parse((await metrics.render()).decode())
        assert seen.value("proxy_jobs_queued") is None
        assert seen.types["proxy_jobs_queued"] == "gauge"


def test_rate_limited_counts_by_reason() -> None:
    metrics = Metrics()
    metrics.rate_limited("rpm")
    metrics.rate_limited("rpm")
    metrics.rate_limited("budget")
    assert metrics.value("proxy_rate_limited_total", reason="rpm") == 2
    assert metrics.value("proxy_rate_limited_total", reason="budget") == 1
    assert metrics.value("proxy_rate_limited_total", reason="tpm") == 0


async def wait_status(http: httpx.AsyncClient, response_id: str,
                      wanted: set[str]) -> dict[str, Any]:
    for _ in range(300):  # bounded: about 6 s
        state: dict[str, Any] = (await http.get(f"{RESPONSES}/{response_id}")).json()
        if state["status"] in wanted:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"{response_id} never reached {wanted}: {state['status']}")


async def test_job_outcomes_are_counted_once_each(app_client: Client) -> None:
    http, runtime = app_client

    async def submit(text: str, **extra: Any) -> str:
        reply = await http.post(RESPONSES, json={"model": "sim-model", "input": text,
                                                 "background": True, **extra})
        assert reply.status_code == 200, reply.text
        return str(reply.json()["id"])

    ends = {
        await submit("cut me [[sim fail=error:1]]"): "failed",  # the stream breaks
        await submit("refuse me [[sim fail=http:500]]"): "failed",  # refused before a byte
        await submit("be long [[sim tokens=64]]", max_output_tokens=16): "incomplete",
        await submit("be quick"): "completed",
    }
    slow = await submit("cancel me [[sim tokens=2000 delay_ms=20]]")
    for _ in range(300):  # bounded: until its turn streams (events past created and queued)
        if len(await whole_log(runtime.store, slow)) > 3:
            break
        await asyncio.sleep(0.02)
    assert (await http.post(f"{RESPONSES}/{slow}/cancel")).json()["status"] == "cancelled"
    ends[slow] = "cancelled"
    for response_id, status in ends.items():
        assert (await wait_status(http, response_id, {status}))["status"] == status
    await idle(runtime)
    seen = await scrape(http)
    assert seen.value("proxy_jobs_total", outcome="failed") == 2
    assert seen.value("proxy_jobs_total", outcome="incomplete") == 1
    assert seen.value("proxy_jobs_total", outcome="completed") == 1
    assert seen.value("proxy_jobs_total", outcome="cancelled") == 1
    assert seen.value("proxy_jobs_total", outcome="requeued") == 0
    # and each job's Response end, by the turn that ran it or where the worker closed it
    assert seen.value("proxy_responses_total", status="failed") == 2
    assert seen.value("proxy_responses_total", status="incomplete") == 1
    assert seen.value("proxy_responses_total", status="cancelled") == 1


async def test_a_job_handed_back_by_a_stopping_worker_is_counted_requeued(
        simulator: Any) -> None:
    runtime = await Runtime.open(Settings.of(upstreams=(simulator.url,)), worker=True)
    try:
        worker = runtime.process.worker
        assert worker is not None
        assert await runtime.queue.enqueue("t", [("resp_handed_back", b"{}")], limit=10,
                                          total=10) == "queued"
        [job] = await runtime.queue.take("us", 1, block_ms=0)
        worker._stopping = True  # taken just as the worker stops (never started: no loops)
        await worker._execute(job)
        assert runtime.metrics.value("proxy_jobs_total", outcome="requeued") == 1
        assert await runtime.queue.length() == 1  # back in the queue for another worker
    finally:
        await runtime.aclose()
