"""The fleet from outside: three simulators behind two proxy instances sharing one
real Redis. Which replica served a request is read from the simulators' own counters.

- every turn of a `previous_response_id` chain, of a conversation and of a `prompt_cache_key`
  lands on one replica, while the turns alternate between the instances (turn 1 of a chain has
  no key: it goes to the least loaded replica, and its turn 2 must follow it there);
- independent requests spread evenly (sequential traffic on an idle fleet is all ties);
- a keyed request whose replica is overloaded (requests sent to it directly, seen through its
  /metrics) sheds to the next replica of its rendezvous order, the same one every time;
- the simulator's /metrics counts the requests it is running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.core.fleet.balancer import Candidate, rendezvous_order
from tests.support.clients import SDK
from tests.support.servers import ServerProcess, start_proxy, start_simulator

pytestmark = pytest.mark.e2e

KEY = "sk-fleet-test"
MODEL = "sim-model"
WAIT_S = 15.0  # the longest any poll below waits for the state it expects


@pytest.fixture(scope="module")
def sims() -> Iterator[list[ServerProcess]]:
    servers = [start_simulator() for _ in range(3)]
    yield servers
    for server in servers:
        server.stop()


def _pair(sims: list[ServerProcess], redis_server: ServerProcess
          ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    # A short discovery interval: the /metrics the tests change are seen within a fraction of
    # a second.
    flags = ("--api-key", KEY, "--discovery-interval", "0.3")
    a = start_proxy([s.url for s in sims], *flags, redis_url=url)
    b = start_proxy([s.url for s in sims], *flags, redis_url=url)
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def pair(sims: list[ServerProcess], redis_server: ServerProcess
         ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    yield from _pair(sims, redis_server)


@pytest.fixture
def fresh_pair(sims: list[ServerProcess], redis_server: ServerProcess
               ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two instances with no history: ties are broken by what each has sent so far, so the
    spread of independent requests is stated from a fresh start."""
    yield from _pair(sims, redis_server)


def chats(sims: list[ServerProcess]) -> list[int]:
    return [httpx.get(s.url + "/sim/stats", timeout=5).json()["chat_requests"] for s in sims]


def served_by(sims: list[ServerProcess], proxy: ServerProcess, **create: Any) -> tuple[int, Any]:
    """Create a response through `proxy` (one chat upstream); the index of the simulator that
    answered it, and the response."""
    before = chats(sims)
    result = SDK.get(proxy.url, KEY).responses.create(model=MODEL, **create)
    moved = [i for i, (x, y) in enumerate(zip(before, chats(sims), strict=True)) if y != x]
    assert len(moved) == 1, (before, moved)
    return moved[0], result


def running(server: ServerProcess) -> float:
    text = httpx.get(server.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running{"))


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def seen_running(proxy: ServerProcess, sim: ServerProcess) -> float:
    """What the proxy's last scrape of `sim` saw running (its /readyz detail)."""
    body = httpx.get(proxy.url + "/readyz", headers={"authorization": f"Bearer {KEY}"},
                     timeout=5).json()
    entry = next(u for u in body["upstreams"] if u["url"] == sim.url)
    return float((entry["metrics"] or {}).get("running", -1))


def busy(sim: ServerProcess, count: int, ms: int) -> list[threading.Thread]:
    """`count` requests straight to `sim` (not through a proxy), each running `ms`."""
    def one() -> None:
        httpx.post(sim.url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"[[sim ttft_ms={ms}]] x"}]})
    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_every_turn_of_a_chain_lands_on_its_first_replica(
        sims: list[ServerProcess], pair: tuple[ServerProcess, ServerProcess]) -> None:
    homes = set()
    for chain in range(3):
        previous: str | None = None
        replicas = []
        for turn in range(6):
            proxy = pair[turn % 2]  # turns alternate between the two instances
            replica, response = served_by(sims, proxy, input=f"chain {chain} turn {turn}",
                                          previous_response_id=previous)
            previous = response.id
            replicas.append(replica)
        assert len(set(replicas)) == 1, replicas
        homes.add(replicas[0])
    assert len(homes) > 1  # turn 1 had no key: chains start on different replicas


def test_a_background_turn_records_its_replica_for_the_follow_up(
        sims: list[ServerProcess], pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    before = chats(sims)
    first = SDK.get(a.url, KEY).responses.create(model=MODEL, input="background turn 1",
                                                 background=True)
    wait_for(lambda: SDK.get(b.url, KEY).responses.retrieve(first.id).status == "completed",
             "the background turn to complete")
    ran = [i for i, (x, y) in enumerate(zip(before, chats(sims), strict=True)) if y != x]
    assert len(ran) == 1
    for turn, proxy in enumerate((b, a, b)):
        replica, first = served_by(sims, proxy, input=f"foreground turn {turn + 2}",
                                   previous_response_id=first.id)
        assert replica == ran[0]


def test_every_turn_of_a_conversation_lands_on_one_replica(
        sims: list[ServerProcess], pair: tuple[ServerProcess, ServerProcess]) -> None:
    conversation = SDK.get(pair[0].url, KEY).conversations.create()
    replicas = set()
    for turn in range(6):
        proxy = pair[turn % 2]
        replica, _ = served_by(sims, proxy, input=f"conversation turn {turn}",
                               conversation=conversation.id)
        replicas.add(replica)
    assert len(replicas) == 1


def test_every_request_with_one_prompt_cache_key_lands_on_one_replica(
        sims: list[ServerProcess], pair: tuple[ServerProcess, ServerProcess]) -> None:
    replicas = set()
    for turn in range(6):
        proxy = pair[turn % 2]
        replica, _ = served_by(sims, proxy, input=f"keyed {turn}",
                               prompt_cache_key="tenant-7-agent", store=False)
        replicas.add(replica)
    assert len(replicas) == 1


def test_independent_requests_spread_across_the_fleet(
        sims: list[ServerProcess], fresh_pair: tuple[ServerProcess, ServerProcess]) -> None:
    counts = [0, 0, 0]
    for n in range(30):
        proxy = fresh_pair[n % 2]
        replica, _ = served_by(sims, proxy, input=f"independent {n}", store=False)
        counts[replica] += 1
    # The stated bound: max/mean <= 1.5 (list order would put all 30 on one).
    assert max(counts) / (sum(counts) / 3) <= 1.5, counts


def test_an_overloaded_affinity_target_sheds_to_its_stable_fallback(
        sims: list[ServerProcess], pair: tuple[ServerProcess, ServerProcess]) -> None:
    key = "shed-me"
    order = [c.url for c in rendezvous_order([Candidate(s.url) for s in sims], key)]
    home, fallback = (next(i for i, s in enumerate(sims) if s.url == url) for url in order[:2])
    a = pair[0]

    def keyed() -> int:
        return served_by(sims, a, input="keyed request", prompt_cache_key=key, store=False)[0]

    assert keyed() == home
    threads = busy(sims[home], 8, ms=6000)
    try:
        wait_for(lambda: seen_running(a, sims[home]) >= 8, "the proxy to scrape the load")
        # Load 8 against a fleet mean of 9/3: over the bound. Every time the same fallback.
        assert [keyed() for _ in range(3)] == [fallback] * 3
    finally:
        for thread in threads:
            thread.join(30)
    wait_for(lambda: seen_running(a, sims[home]) == 0, "the load to be scraped gone")
    assert keyed() == home  # the overload is over: the key is back home


def test_the_simulator_metrics_count_the_requests_it_runs(sims: list[ServerProcess]) -> None:
    sim = sims[2]
    wait_for(lambda: running(sim) == 0, "an idle simulator")
    threads = busy(sim, 3, ms=1500)
    try:
        wait_for(lambda: running(sim) == 3, "three running requests")
        text = httpx.get(sim.url + "/metrics", timeout=5).text
        assert f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0.0' in text
        assert "# TYPE vllm:kv_cache_usage_perc gauge" in text
    finally:
        for thread in threads:
            thread.join(30)
    assert running(sim) == 0


def test_a_fleet_file_sends_each_replica_its_own_key_and_never_logs_it(
        sims: list[ServerProcess], tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"- url: {sims[0].url}\n  api_key: sk-replica-zero\n  models: [{MODEL}]\n"
                     f"- url: {sims[1].url}\n  weight: 2\n  max_concurrency: 4\n")
    proxy = start_proxy([], "--fleet", str(fleet), "--upstream-api-key", "sk-fleet-wide",
                        "--log-level", "debug")
    try:
        seen: dict[int, str] = {}
        for n in range(6):
            replica, _ = served_by(sims, proxy, input=f"fleet file {n}", store=False)
            headers = httpx.get(sims[replica].url + "/sim/stats", timeout=5).json()[
                "last_headers"]
            seen[replica] = headers.get("authorization", "")
        assert seen == {0: "Bearer sk-replica-zero", 1: "Bearer sk-fleet-wide"}
    finally:
        proxy.stop()
    assert "sk-replica-zero" not in Path(proxy._log.name).read_text(errors="replace")


def test_one_instance_on_its_defaults_carries_300_concurrent_stored_streams(
        sims: list[ServerProcess]) -> None:
    """`serve` with no flags past the upstream (what `make run` does: the embedded store, flow
    control on its defaults): 300 stored streams at once, each held open ~1 s at the replica so
    they overlap. With the old fixed cap, 64 went upstream at a time and the embedded store's
    100-connection pool answered about half of them 503 (MaxConnectionsError)."""
    import asyncio

    count = 300
    proxy = start_proxy(sims[0].url)
    try:
        httpx.post(sims[0].url + "/sim/reset", timeout=5).raise_for_status()
        body = {"model": MODEL, "stream": True,
                "input": "many at once [[sim ttft_ms=1000 tokens=20 delay_ms=20]]"}

        async def one(client: httpx.AsyncClient) -> tuple[int, bytes]:
            async with client.stream("POST", "/v1/responses", json=body) as response:
                return response.status_code, await response.aread()

        async def all_at_once() -> list[tuple[int, bytes]]:
            limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=proxy.url, timeout=30, limits=limits) as client:
                return await asyncio.gather(*(one(client) for _ in range(count)))

        results = asyncio.run(all_at_once())
        failed = [(status, text[:200]) for status, text in results
                  if status != 200 or b"response.completed" not in text]
        assert failed == [], (len(failed), failed[:3])
        stats = httpx.get(sims[0].url + "/sim/stats", timeout=5).json()
        assert stats["max_concurrent_streams"] == count
    finally:
        proxy.stop()
