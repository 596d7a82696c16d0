"""Flow control (services/fleet/admission.py): a saturated fleet queues requests fairly and with a
deadline, then answers 429 with Retry-After in OpenAI's shape.

The first tests drive `Admission` against a fleet whose in-flight counts the test sets (a slot
frees when the test says so); the last ones run the whole app in-process against the simulator,
with one slot per replica held by a slow request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.core.errors import RateLimited
from proxy.core.fleet.replicaload import Signal
from proxy.services.fleet.admission import ADAPTIVE_MARGIN, Admission, AdmittedCall
from proxy.services.fleet.fleet import Call, Fleet
from proxy.settings import Settings
from tests.conftest import SimControl
from tests.support.inprocess import post_scope, receive_until, until
from tests.unit.test_fleet import fleet


def saturated(cap: int = 1, **kwargs: Any) -> tuple[Fleet, Admission]:
    f = fleet("http://a", "http://b")
    for replica in f.replicas:
        replica.in_flight = cap
    return f, Admission(f, per_replica=cap, **kwargs)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def free_one(f: Fleet, admission: Admission) -> None:
    """A call ends (what an admitted call's close does)."""
    f.replicas[0].in_flight -= 1
    admission.pump_all()


async def admitted_in_order(f: Fleet, admission: Admission, count: int,
                            order: list[str]) -> None:
    """Free one slot at a time; each admitted waiter takes it (as its call would)."""
    for _ in range(count):
        before = len(order)
        free_one(f, admission)
        await settle()
        assert len(order) == before + 1


def start(f: Fleet, admission: Admission, name: str, order: list[str], *, priority: bool = False,
          model: str = "m") -> asyncio.Task[None]:
    async def run() -> None:
        await admission.admit(model, name[0], priority=priority)
        order.append(name)
        # The slot is taken as fleet.open would take it: on the least loaded replica.
        replicas = [r for r in f.replicas if r.serves(model)]
        min(replicas, key=lambda r: r.in_flight).in_flight += 1
    return asyncio.create_task(run())


async def test_room_admits_at_once_and_a_saturated_fleet_queues() -> None:
    f, admission = saturated()
    f.replicas[1].in_flight = 0
    await asyncio.wait_for(admission.admit("m", "a"), 1)  # room: no wait
    f.replicas[1].in_flight = 1
    order: list[str] = []
    task = start(f, admission, "a0", order)
    await settle()
    assert admission.queued == 1 and order == []
    await admitted_in_order(f, admission, 1, order)
    assert order == ["a0"] and admission.queued == 0
    await task


async def test_fair_between_two_keys_a_burst_does_not_starve_the_other() -> None:
    f, admission = saturated()
    order: list[str] = []
    tasks = [start(f, admission, f"a{n}", order) for n in range(4)]
    await settle()
    tasks.append(start(f, admission, "b0", order))
    await settle()
    await admitted_in_order(f, admission, 5, order)
    assert order == ["a0", "b0", "a1", "a2", "a3"]
    await asyncio.gather(*tasks)


async def test_by_default_requests_wait_only_while_the_replica_reports_waiting_ones() -> None:
    """No cap configured: the replica's own queue (`vllm:num_requests_waiting` at the last
    scrape) decides. While it queues, we hold past what it runs (plus a margin), fairly between
    keys; once a scrape shows its queue empty, everybody goes."""
    f = fleet("http://a")
    admission = Admission(f)
    replica = f.replicas[0]
    replica.in_flight = 500
    await asyncio.wait_for(admission.admit("m", "a"), 1)  # no signal: no cap
    replica.signal = Signal(running=2, waiting=3)
    replica.in_flight = 2 + ADAPTIVE_MARGIN
    order: list[str] = []
    tasks = [start(f, admission, f"a{n}", order) for n in range(3)]
    await settle()
    tasks.append(start(f, admission, "b0", order))
    await settle()
    assert admission.queued == 4 and order == []
    await admitted_in_order(f, admission, 2, order)
    assert order == ["a0", "b0"]
    replica.signal = Signal(running=40, waiting=0)  # the next scrape: its queue drained
    admission.pump_all()
    await asyncio.gather(*tasks)
    assert order == ["a0", "b0", "a1", "a2"]


async def test_priority_goes_first() -> None:
    f, admission = saturated()
    order: list[str] = []
    tasks = [start(f, admission, f"a{n}", order) for n in range(2)]
    await settle()
    tasks.append(start(f, admission, "p0", order, priority=True))
    await settle()
    await admitted_in_order(f, admission, 3, order)
    assert order == ["p0", "a0", "a1"]
    await asyncio.gather(*tasks)


async def test_a_client_that_leaves_leaves_the_queue() -> None:
    f, admission = saturated()
    order: list[str] = []
    gone = start(f, admission, "a0", order)
    stays = start(f, admission, "b0", order)
    await settle()
    assert admission.queued == 2
    gone.cancel()  # what the web layer does when the client disconnects
    await settle()
    assert admission.queued == 1 and gone.cancelled()
    await admitted_in_order(f, admission, 1, order)
    assert order == ["b0"]
    await stays


async def test_a_waiter_cancelled_after_its_grant_hands_the_slot_on() -> None:
    f, admission = saturated()
    order: list[str] = []
    first = start(f, admission, "a0", order)
    second = start(f, admission, "b0", order)
    await settle()
    f.replicas[0].in_flight -= 1
    admission.pump_all()  # a0 is granted ...
    first.cancel()  # ... but leaves before it runs
    await settle()
    assert order == ["b0"] and admission.queued == 0
    await second


async def test_the_deadline_ends_the_wait_with_a_429_and_retry_after() -> None:
    _, admission = saturated(timeout=0.2)
    started = time.monotonic()
    with pytest.raises(RateLimited) as info:
        await asyncio.wait_for(admission.admit("m", "a"), 5)
    assert time.monotonic() - started >= 0.15  # it waited (timers may fire a hair early)
    error = info.value
    assert error.status == 429 and error.headers["Retry-After"] == "1"
    assert error.body()["error"]["code"] == "rate_limit_exceeded"
    assert "saturated" in error.message
    assert admission.queued == 0


async def test_a_full_queue_is_a_429_at_once_but_a_background_job_may_still_wait() -> None:
    f, admission = saturated(max_queued=1)
    order: list[str] = []
    waiting = start(f, admission, "a0", order)
    await settle()
    with pytest.raises(RateLimited) as info:
        await asyncio.wait_for(admission.admit("m", "b"), 0.5)  # no wait at all
    assert "already waiting" in info.value.message
    job = asyncio.create_task(admission.admit("m", "j", bounded=False))
    await settle()
    assert admission.queued == 2
    await admitted_in_order(f, admission, 1, order)
    free_one(f, admission)
    await asyncio.wait_for(job, 1)
    await waiting


async def test_a_key_that_fills_the_queue_gives_its_newest_place_to_another_key() -> None:
    """One key may fill the whole queue, but not shut another key out: a request of a key with
    no place takes the newest place of the key holding the most (that request gets the 429 at
    once), and is then served in its round-robin turn. A background job is never let go."""
    f, admission = saturated(max_queued=4)
    order: list[str] = []
    mine = [start(f, admission, f"a{n}", order) for n in range(4)]
    job = asyncio.create_task(admission.admit("m", "j", bounded=False))
    await settle()
    assert admission.queued == 5
    other = start(f, admission, "b0", order)
    await settle()
    with pytest.raises(RateLimited) as info:
        await asyncio.wait_for(mine[3], 1)  # a3, the newest of the largest holder
    error = info.value
    assert error.status == 429 and error.headers["Retry-After"] == "1"
    assert "this request's place went to another key's" in error.message
    assert admission.queued == 5 and not job.done()
    await admitted_in_order(f, admission, 4, order)
    assert order == ["a0", "b0", "a1", "a2"]
    free_one(f, admission)
    await asyncio.wait_for(job, 1)
    await asyncio.gather(*mine[:3], other)
    assert admission.queued == 0


async def test_in_a_full_queue_places_tend_to_equal_shares_not_past_them() -> None:
    """A key takes another's place only from one holding at least two more than itself: with
    a:2 b:1 in a full queue of three, neither a third of a's nor a second of b's gets in."""
    f, admission = saturated(max_queued=3)
    order: list[str] = []
    waiting = [start(f, admission, name, order) for name in ("a0", "a1", "b0")]
    await settle()
    for tenant in ("a", "b"):
        with pytest.raises(RateLimited) as info:
            await asyncio.wait_for(admission.admit("m", tenant), 0.5)
        assert "already waiting" in info.value.message
    assert admission.queued == 3 and not any(t.done() for t in waiting)
    await admitted_in_order(f, admission, 3, order)
    assert order == ["a0", "b0", "a1"]
    await asyncio.gather(*waiting)


async def test_one_saturated_model_does_not_hold_up_another() -> None:
    f, admission = saturated()
    f.replicas[1].model_ids = frozenset({"other"})
    f.replicas[1].in_flight = 0
    f.replicas[0].model_ids = frozenset({"m"})
    order: list[str] = []
    waiting = start(f, admission, "a0", order)
    await settle()
    await asyncio.wait_for(admission.admit("other", "b"), 1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


async def test_an_unknown_model_is_left_to_the_fleet_to_answer() -> None:
    _, admission = saturated()
    await asyncio.wait_for(admission.admit("nobody-serves-this", "a"), 1)


# -- the whole app against the simulator -------------------------------------------------------
SLOW = "hold the slot [[sim ttft_ms=4000 tokens=2]]"


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "sim-model", "messages": [
        {"role": "user", "content": "queued [[sim tokens=2]]"}]}),
    ("/v1/responses", {"model": "sim-model", "store": False, "stream": True,
                       "input": "queued [[sim tokens=2]]"}),
], ids=["chat", "responses"])
async def test_saturated_fleet_queues_then_429s_within_the_deadline(
        settings: Settings, sim: SimControl, path: str, body: dict[str, Any]) -> None:
    app = create_app(settings.replace(run_jobs=False, max_inflight_per_replica=1,
                                      queue_timeout=0.5))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                     timeout=20) as client:
            slow = asyncio.create_task(client.post("/v1/chat/completions", json={
                "model": "sim-model", "messages": [{"role": "user", "content": SLOW}]}))
            for _ in range(200):  # until the slow request holds the one slot
                if app.state.runtime.fleet.replicas[0].in_flight == 1:
                    break
                await asyncio.sleep(0.01)
            started = time.monotonic()
            response = await client.post(path, json=body)
            waited = time.monotonic() - started
            assert response.status_code == 429, response.text
            assert response.headers["retry-after"] == "1"
            error = response.json()["error"]
            assert error["code"] == "rate_limit_exceeded" and "saturated" in error["message"]
            assert 0.5 <= waited < 3.5  # it queued, and gave up before the slot freed (4 s)
            assert not slow.done()
            assert (await slow).status_code == 200
            # The slot is free again: the next request goes through.
            assert (await client.post(path, json=body)).status_code == 200


async def test_a_client_that_disconnects_while_queued_leaves_the_queue(
        settings: Settings, sim: SimControl) -> None:
    """Through the whole app: the web layer cancels the create when the client leaves, and the
    queued request is gone from the queue at once (not at its deadline)."""
    app = create_app(settings.replace(run_jobs=False, max_inflight_per_replica=1,
                                      queue_timeout=20))
    raw = orjson.dumps({"model": "sim-model", "store": False,
                        "input": "queued [[sim tokens=2]]"})
    leave = asyncio.Event()
    receive = receive_until(raw, leave)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with app.router.lifespan_context(app):
        admission = app.state.runtime.services.responses._gateway.admission
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                     timeout=20) as client:
            slow = asyncio.create_task(client.post("/v1/chat/completions", json={
                "model": "sim-model", "messages": [{"role": "user", "content": SLOW}]}))
            for _ in range(200):
                if app.state.runtime.fleet.replicas[0].in_flight == 1:
                    break
                await asyncio.sleep(0.01)
            queued = asyncio.create_task(app(post_scope("/v1/responses", raw), receive, send))
            for _ in range(200):
                if admission.queued == 1:
                    break
                await asyncio.sleep(0.01)
            assert admission.queued == 1
            leave.set()
            await asyncio.wait_for(queued, 2)
            assert admission.queued == 0
            assert not slow.done()  # the slot never freed: leaving emptied the queue
            assert (await slow).status_code == 200
    assert sim.stats()["prompt_counts"].get("queued") is None  # it never went upstream




# -- defaults never throttle a healthy replica ----------------------------------------------
# Its first token would come after the test's own timeout: only the client's leaving ends it.
HELD = "held open [[sim ttft_ms=120000 tokens=2]]"


async def _held_streams(settings: Settings, sim: SimControl, count: int
                        ) -> tuple[int, int, int, list[int]]:
    """`count` streamed responses at once through the in-process app to one replica, each held
    open at the simulator until its client leaves. Once every one is either in flight or in
    our queue, and each one in flight is started at the simulator and answered its client's
    headers: (streams the simulator started, the replica's in flight, queued, the statuses
    sent); then every client leaves.

    Why held rather than timed: overlapping by a first token 1 s away was a race with the set-up
    of the streams themselves, which a loaded machine lost (fewer than all of them at the
    simulator at once); held, whatever the machine's speed, only admission decides how many
    reach the replica together."""
    app = create_app(settings.replace(run_jobs=False, queue_timeout=20))
    raw = orjson.dumps({"model": "sim-model", "store": False, "stream": True, "input": HELD})
    leave = asyncio.Event()
    statuses: list[int] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def stats() -> dict[str, Any]:
        return await asyncio.to_thread(sim.stats)

    async with app.router.lifespan_context(app):
        admission = app.state.runtime.services.responses._gateway.admission
        replica = app.state.runtime.fleet.replicas[0]
        tasks = [asyncio.create_task(app(post_scope("/v1/responses", raw),
                                         receive_until(raw, leave), send))
                 for _ in range(count)]
        try:
            async def placed() -> bool:
                return bool(replica.in_flight + admission.queued == count)

            await until(placed, tries=400)
            in_flight, queued = replica.in_flight, admission.queued

            async def answering() -> bool:  # at the simulator, and their headers sent
                return (len(statuses) >= in_flight
                        and bool((await stats())["streams_started"] >= in_flight))

            await until(answering, tries=400)
            started = int((await stats())["streams_started"])
            sent = list(statuses)
        finally:
            leave.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    async def all_left() -> bool:  # none left open at the simulator for the next test
        return bool((await stats())["streams_aborted"] >= started)

    await until(all_left, tries=400)
    return started, in_flight, queued, sent


async def test_default_flow_control_sends_every_stream_to_a_healthy_replica_at_once(
        settings: Settings, sim: SimControl) -> None:
    """No flow-control flags: 100 streams (past the old fixed cap of 64) are all in flight at
    the replica together; none waits in our queue behind a replica that reports no queue."""
    started, in_flight, queued, statuses = await _held_streams(settings, sim, 100)
    assert (started, in_flight, queued) == (100, 100, 0)
    assert statuses == [200] * 100


async def test_an_explicit_cap_still_holds_the_replica_to_it(
        settings: Settings, sim: SimControl) -> None:
    started, in_flight, queued, statuses = await _held_streams(
        settings.replace(max_inflight_per_replica=8), sim, 24)
    assert (started, in_flight, queued) == (8, 8, 16)
    assert statuses == [200] * 8


class _Response:
    closed = False

    async def aclose(self) -> None:
        self.closed = True


async def test_a_watched_call_is_the_call_and_hands_its_slot_on_when_closed() -> None:
    """`watch` copies the call's state (not through `dataclasses.fields` and `__init__`, ~1 µs
    a create): the same replica, response and span; closing it frees the replica's slot and
    admits the next waiter, once however often it is closed."""
    f, admission = saturated()
    replica = f.replicas[0]
    response = _Response()
    call = admission.watch(Call(replica, response))  # type: ignore[arg-type]
    assert isinstance(call, AdmittedCall)
    assert (call.replica, call.response, call.span) == (replica, response, None)
    order: list[str] = []
    task = start(f, admission, "a0", order)
    await settle()
    assert order == []
    await call.aclose()
    await call.aclose()
    await settle()
    assert order == ["a0"] and response.closed and call.released is None
    assert replica.in_flight == 1  # 1 - 1 (the close) + 1 (the waiter's open)
    await task
