"""The quick chaos scenarios, against real processes: a replica whose network stalls
(reliability/forwarder.py between the proxy and the simulator), Redis killed under load and
restarted with its append-only file, Redis at `maxmemory`; and the closed gaps (docs/RELIABILITY.md
"Known gaps (closed)") against a real redis-server: a stream whose end arrives while Redis is down
is stored whole once Redis is back (flush and final write retried), and an end that could not be
stored at all is closed by the lease sweep, never left `in_progress` by its writer.

The client that never reads is test_stream_bounds_e2e.py
::test_a_client_that_stops_reading_is_abandoned_and_the_upstream_aborted; the heavier
scenarios (a replica, a worker or an instance killed mid-stream, a thousand replays, every size
limit) run in `make chaos` (reliability/chaos.py). Every wait is bounded; nothing asserts on
speed.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis

from reliability.forwarder import Forwarder
from tests.conftest import SimControl
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy, start_redis, wait_for

pytestmark = pytest.mark.e2e

AUTH = {"authorization": "Bearer sk-chaos"}
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}
# Every fsync'd write survives a SIGKILL: what the proxy acknowledged is there after a restart.
AOF = ("--appendonly", "yes", "--appendfsync", "always")



def events_of(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


class Reader(threading.Thread):
    """A streamed create read to its end in the background."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def deltas(self) -> int:
        return sum(e["type"] == "response.output_text.delta" for e in self.events)

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/responses", json=self.body, headers=AUTH,
                              timeout=60) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(orjson.loads(line[6:]))
        except BaseException as exc:
            self.error = exc


def stored(proxy: ServerProcess, response_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{proxy.url}/v1/responses/{response_id}", headers=AUTH,
                                     timeout=15).json()
    return body


def replay(proxy: ServerProcess, response_id: str) -> list[dict[str, Any]]:
    got = httpx.get(f"{proxy.url}/v1/responses/{response_id}?stream=true", headers=AUTH,
                    timeout=30)
    assert got.status_code == 200, got.text
    return events_of(got.text)


class AofRedis:
    """redis-server with an fsync-always append-only file, killed and started again on the
    same port and directory."""

    def __init__(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="redis-aof-")
        self.server = start_redis(flags=AOF, workdir=self.workdir)
        self.port = self.server.port
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        self.server.kill()

    def restart(self) -> None:
        self.server = start_redis(port=self.port, flags=AOF, workdir=self.workdir)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def aof_redis() -> Iterator[AofRedis]:
    server = AofRedis()
    yield server
    server.stop()


# -- a replica whose network stalls ------------------------------------------------------------

def test_a_stalled_replica_fails_the_stream_cleanly_and_the_next_call_goes_through(
        simulator: ServerProcess, redis_server: ServerProcess, sim: SimControl) -> None:
    link = Forwarder(simulator.port).start()
    proxy = start_proxy(link.url, "--first-token-timeout", "2", "--idle-timeout", "2",
                        "--first-byte-timeout", "2",
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        reader = Reader(proxy.url, {"model": "sim-model", "stream": True,
                                    "input": "stall me [[sim tokens=400 delay_ms=20]]"})
        reader.start()
        assert wait_for(lambda: reader.deltas() >= 5, 20), "the stream never started"
        link.stall()  # the replica goes silent: no reset, no EOF
        reader.join(30)
        assert not reader.is_alive(), "the client was left waiting on a silent replica"
        assert reader.error is None
        assert reader.events[-1]["type"] == "response.failed"
        check_stream(reader.events)
        response_id = reader.events[0]["response"]["id"]
        assert stored(proxy, response_id)["status"] == "failed"
        assert replay(proxy, response_id) == reader.events  # what was sent is what is kept
        # Before the first byte: a non-streamed call is a 504, in OpenAI's error shape.
        stalled = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                             json={"model": "sim-model", "input": "anyone there?"})
        assert stalled.status_code == 504, stalled.text
        assert stalled.json()["error"]["message"]
        link.resume()
        after = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                           json={"model": "sim-model", "input": "back again"})
        assert after.status_code == 200, after.text
        assert after.json()["status"] == "completed"
    finally:
        proxy.stop()
        link.stop()


# -- Redis killed under load -------------------------------------------------------------------

def test_redis_killed_under_load_loses_no_acknowledged_response(
        simulator: ServerProcess, aof_redis: AofRedis, sim: SimControl) -> None:
    proxy = start_proxy(simulator.url, redis_url=aof_redis.url)
    answers: list[tuple[str, int, dict[str, Any]]] = []
    stop = threading.Event()

    async def client(n: int) -> None:
        async with httpx.AsyncClient(base_url=proxy.url, headers=AUTH, timeout=60) as http:
            i = 0
            while not stop.is_set():
                prompt = f"load {n}-{i} [[sim tokens=20 delay_ms=5]]"
                i += 1
                got = await http.post("/v1/responses", json={"model": "sim-model",
                                                             "input": prompt})
                answers.append((prompt, got.status_code, got.json()))

    async def load() -> None:
        await asyncio.gather(*(client(n) for n in range(8)))

    runner = threading.Thread(target=asyncio.run, args=(load(),), daemon=True)
    try:
        runner.start()
        assert wait_for(lambda: len(answers) >= 20, 30), "no load"
        aof_redis.kill()
        down_from = len(answers)
        # Back as soon as the outage shows (a 503, or a write that failed and is being
        # retried), well within the final write's retries (about 4 s): an outage longer than
        # those is test_an_end_that_could_not_be_stored_is_closed_by_the_lease_sweep.
        assert wait_for(lambda: any(s == 503 for _, s, _ in answers[down_from:])
                        or "retrying" in proxy.full_output(), 20)
        aof_redis.restart()
        restarted = len(answers)
        assert wait_for(lambda: sum(s == 200 for _, s, _ in answers[restarted:]) >= 20, 30)
        stop.set()
        runner.join(60)
        assert not runner.is_alive()
        statuses = {s for _, s, _ in answers}
        assert statuses <= {200, 503}, statuses  # never a 500
        for _, status, body in answers:
            if status == 503:
                assert body["error"]["code"] == "store_unavailable", body
        ok = [(prompt, body["id"]) for prompt, status, body in answers if status == 200]
        lost = [rid for _, rid in ok if stored(proxy, rid).get("status") != "completed"]
        assert lost == []  # every acknowledged response is there, completed
        counts = sim.stats()["prompt_counts"]
        twice = [p for p, n in counts.items() if n > 1 and p.startswith("load ")]
        assert twice == []  # nothing was run twice
    finally:
        stop.set()
        proxy.stop()


# -- Redis full --------------------------------------------------------------------------------

def test_redis_at_maxmemory_is_a_clear_503_and_recovers(simulator: ServerProcess) -> None:
    own = start_redis()  # not the session's: a full store must not reach another test
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{own.port}/0")
    admin = redis.Redis(port=own.port)
    try:
        before = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                            json={"model": "sim-model", "input": "before the store fills"})
        assert before.status_code == 200
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")  # below what is used: every write is refused (OOM)
        for body in ({}, {"stream": True}, {"background": True}):
            full = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                              json={"model": "sim-model", "input": "while full", **body})
            assert full.status_code == 503, (body, full.text)
            error = full.json()["error"]
            assert error["code"] == "store_unavailable" and "memory" in error["message"].lower()
        # Reads and stateless traffic go on.
        assert stored(proxy, before.json()["id"])["status"] == "completed"
        free = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                          json={"model": "sim-model", "input": "stateless", "store": False})
        assert free.status_code == 200
        admin.config_set("maxmemory", "0")
        after = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=30,
                           json={"model": "sim-model", "input": "room again"})
        assert after.status_code == 200, after.text
    finally:
        admin.close()
        proxy.stop()
        own.stop()


# -- against a real Redis: the end of a stream while Redis is down -----------------------------

def test_a_flush_failed_while_redis_was_down_is_retried_and_the_replay_is_whole(
        simulator: ServerProcess, aof_redis: AofRedis) -> None:
    proxy = start_proxy(simulator.url, redis_url=aof_redis.url)
    try:
        reader = Reader(proxy.url, {"model": "sim-model", "stream": True,
                                    "input": "outlast redis [[sim tokens=60 delay_ms=20]]"})
        reader.start()
        assert wait_for(lambda: reader.deltas() >= 10, 20), "the stream never started"
        aof_redis.kill()
        assert wait_for(lambda: "event log write failed" in proxy.full_output(), 20)
        aof_redis.restart()  # within the flush's retries (about 4 s)
        reader.join(30)
        assert not reader.is_alive() and reader.error is None
        assert reader.events[-1]["type"] == "response.completed"
        response_id = reader.events[0]["response"]["id"]
        assert stored(proxy, response_id)["status"] == "completed"
        assert replay(proxy, response_id) == reader.events  # event for event, none skipped
    finally:
        proxy.stop()


def test_a_stream_ending_while_redis_is_down_is_stored_once_it_is_back(
        simulator: ServerProcess, aof_redis: AofRedis) -> None:
    proxy = start_proxy(simulator.url, redis_url=aof_redis.url)
    try:
        reader = Reader(proxy.url, {"model": "sim-model", "stream": True,
                                    "input": "outlast redis [[sim tokens=60 delay_ms=20]]"})
        reader.start()
        assert wait_for(lambda: reader.deltas() >= 10, 20), "the stream never started"
        aof_redis.kill()
        # Down past the log's retries (its flushes are given up) and into the final write's:
        # the final write is retried and lands once Redis is back.
        assert wait_for(lambda: "final write of" in proxy.full_output(), 30), proxy.output()
        aof_redis.restart()
        reader.join(30)
        assert not reader.is_alive() and reader.error is None
        assert reader.events[-1]["type"] == "response.completed"
        response_id = reader.events[0]["response"]["id"]
        assert stored(proxy, response_id)["status"] == "completed"
        # The log could not be completed: the replay is rebuilt from the final object, the
        # source of truth. Its numbering is dense and it ends as the stream did.
        kept = replay(proxy, response_id)
        assert [e["sequence_number"] for e in kept] == list(range(len(kept)))
        check_stream(kept)
        assert kept[-1]["type"] == "response.completed"
        assert kept[-1]["response"]["output"] == reader.events[-1]["response"]["output"]
    finally:
        proxy.stop()


def test_an_end_that_could_not_be_stored_is_closed_by_the_lease_sweep(
        simulator: ServerProcess, aof_redis: AofRedis) -> None:
    proxy = start_proxy(simulator.url, "--lease-ttl", "2", redis_url=aof_redis.url)
    try:
        reader = Reader(proxy.url, {"model": "sim-model", "stream": True,
                                    "input": "outlast retries [[sim tokens=60 delay_ms=20]]"})
        reader.start()
        assert wait_for(lambda: reader.deltas() >= 10, 20), "the stream never started"
        aof_redis.kill()
        # Redis stays down past every retry of the final write: the client still gets its end.
        reader.join(60)
        assert not reader.is_alive() and reader.error is None
        assert reader.events[-1]["type"] == "response.completed"
        assert "could not store the end of" in proxy.full_output()
        aof_redis.restart()  # the object comes back `in_progress`, with the writer's lease
        response_id = reader.events[0]["response"]["id"]
        assert wait_for(lambda: stored(proxy, response_id)["status"] in TERMINAL, 30)
        closed = stored(proxy, response_id)
        assert closed["status"] == "failed" and closed["error"]["message"]
        kept = replay(proxy, response_id)
        assert kept[-1]["type"] == "response.failed"
        assert [e["sequence_number"] for e in kept] == list(range(len(kept)))
    finally:
        proxy.stop()
