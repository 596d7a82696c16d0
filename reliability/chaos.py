"""`make chaos`: one fault at a time against real processes, each scenario printing what the
client saw, what is stored afterwards, and how many answers were lost or run twice.

    python -m reliability.chaos                 # every scenario (a few minutes)
    python -m reliability.chaos --only stall    # the scenarios whose name contains "stall"
    python -m reliability.chaos --markdown      # the table docs/RELIABILITY.md shows

"Lost": a response the client was given (200, or a stream that reached its terminal event)
that is not stored as it was given, or a job that never ended. "Twice": a prompt the simulator
received more than once (every prompt is unique; /sim/stats counts them). Each scenario starts
its own processes and stops them, whatever happens; every wait is bounded, so a run ends.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import orjson
import redis

from reliability.clusterfailover import ROWS as CLUSTER_ROWS
from reliability.failover import LAG, sentinel_primary_killed
from reliability.forwarder import Forwarder
from reliability.lab import (
    AUTH,
    TERMINAL,
    Lab,
    Reader,
    Redis,
    cpu_seconds,
    dense,
    lab,
    pid_of,
    replay,
    rss_bytes,
    sim_stats,
    stored,
    wait_for,
)
from tests.support.servers import start_mcp_server, start_proxy, start_simulator, start_worker

MODEL = "sim-model"


@dataclass
class Outcome:
    client: str  # what the client saw
    stored: str  # what is stored afterwards
    lost: int
    twice: int
    ok: bool  # the scenario's own verdict: the behaviour the docs promise


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str
    run: Callable[[Lab], Outcome]


def post(base: str, text: object, **body: object) -> httpx.Response:
    return httpx.post(base + "/v1/responses", headers=AUTH, timeout=60,
                      json={"model": MODEL, "input": text, **body})


def statuses(codes: list[int]) -> str:
    return ", ".join(f"{n}x{code}" for code, n in sorted(Counter(codes).items()))


def twice(simulator_stats: dict[str, object], prefix: str) -> int:
    counts = simulator_stats["prompt_counts"]
    assert isinstance(counts, dict)
    return sum(1 for prompt, n in counts.items() if prompt.startswith(prefix) and n > 1)


# -- Redis killed under load -------------------------------------------------------------------

class Load:
    """`clients` loops of stored, non-streamed creates with unique prompts, in a thread."""

    def __init__(self, base: str, tag: str, clients: int = 16) -> None:
        self.base, self.tag, self.clients = base, tag, clients
        # (sent, answered, status, body), times on the monotonic clock
        self.answers: list[tuple[float, float, int, dict[str, object]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._all()), daemon=True)

    async def _one(self, n: int) -> None:
        async with httpx.AsyncClient(base_url=self.base, headers=AUTH, timeout=60) as http:
            i = 0
            while not self._stop.is_set():
                i += 1
                sent = time.monotonic()
                try:
                    got = await http.post("/v1/responses", json={
                        "model": MODEL, "input": f"{self.tag} {n}-{i} [[sim tokens=20]]"})
                    self.answers.append((sent, time.monotonic(), got.status_code, got.json()))
                except httpx.HTTPError:
                    self.answers.append((sent, time.monotonic(), 0, {}))

    async def _all(self) -> None:
        await asyncio.gather(*(self._one(n) for n in range(self.clients)))

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def redis_restart(aof: bool) -> Callable[[Lab], Outcome]:
    def run(running: Lab) -> Outcome:
        sim = running.keep(start_simulator())
        store = Redis(running, aof=aof)
        proxy = running.keep(start_proxy(sim.url, redis_url=store.url))
        tag = f"restart-aof={aof}"
        load = Load(proxy.url, tag).start()
        running.on_close(load.stop)
        wait_for(lambda: len(load.answers) >= 100, 60)
        killed = time.monotonic()
        store.kill()
        time.sleep(1.0)  # an outage of about a second: within the final write's retries
        store.restart()
        back = time.monotonic()
        wait_for(lambda: sum(1 for *_, s, _ in load.answers if s == 200) >= 100 + len(
            [a for a in load.answers if a[1] < back]), 60)
        load.stop()
        codes = [s for *_, s, _ in load.answers]
        acknowledged = [(sent, str(b["id"])) for sent, _, s, b in load.answers if s == 200]
        missing = {rid for _, rid in acknowledged
                   if stored(proxy.url, rid).get("status") != "completed"}
        # Without persistence, everything created before the restart is gone with it.
        wiped = set() if aof else {rid for sent, rid in acknowledged if sent < back}
        wrong = [s for s in codes if s not in (200, 503)]
        first_ok = min((done for _, done, s, _ in load.answers if done > back and s == 200),
                       default=0.0)
        recovery = f"{first_ok - back:.1f}s after the restart" if first_ok else "never"
        client = (f"Redis down {back - killed:.1f}s: {statuses(codes)} over {len(codes)} "
                  f"creates (16 clients); every 503 is store_unavailable; a 200 again "
                  f"{recovery}")
        what = (f"{len(acknowledged) - len(missing)}/{len(acknowledged)} acknowledged "
                "responses stored completed")
        if not aof:
            what += (f"; the {len(missing & wiped)} missing were all created before the "
                     "restart (no persistence: Redis came back empty)")
        lost = len(missing - wiped)
        ok = not wrong and lost == 0 and first_ok > 0
        return Outcome(client, what, lost, twice(sim_stats(sim), tag), ok)

    return run


# -- Redis full --------------------------------------------------------------------------------

def redis_full(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    proxy = running.keep(start_proxy(sim.url, "--lease-ttl", "3", redis_url=store.url))
    admin = redis.Redis(port=store.port)
    running.on_close(admin.close)
    # A stream already running when the store fills up.
    live = Reader(proxy.url + "/v1/responses",
                  {"model": MODEL, "stream": True, "input": "full-live [[sim tokens=100 "
                   "delay_ms=20]]"})
    live.start()
    wait_for(lambda: live.deltas() >= 5, 30)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", str(int(admin.info("memory")["used_memory"]) // 2))
    refused = [post(proxy.url, f"full-new {i}", **extra)
               for i, extra in enumerate([{}, {"stream": True}, {"background": True}])]
    stateless = post(proxy.url, "full-stateless", store=False)
    live.join(60)
    held_full = time.monotonic()
    time.sleep(2)  # the store stays full a moment after the stream's end
    admin.config_set("maxmemory", "0")
    freed = time.monotonic()
    wait_for(lambda: post(proxy.url, "full-after").status_code == 200, 30, every=0.2)
    recovered = time.monotonic() - freed
    response_id = live.response_id() if live.events else ""
    wait_for(lambda: stored(proxy.url, response_id).get("status") in TERMINAL, 30, every=0.2)
    final = stored(proxy.url, response_id)
    codes = [r.status_code for r in refused]
    errors = {r.json()["error"]["code"] for r in refused if r.status_code == 503}
    message = refused[0].json()["error"]["message"] if refused[0].status_code == 503 else ""
    client = (f"new creates (plain, stream, background): {statuses(codes)} {sorted(errors)} "
              f"\"{message}\"; store:false {stateless.status_code}; the stream already "
              f"running: {live.last()}; 200 again {recovered:.1f}s after memory was freed")
    what = (f"the running stream's response: {final.get('status')} (its end could not be "
            f"stored while full for {freed - held_full:.0f}s+; the lease sweep closed it)")
    ok = (set(codes) == {503} and errors == {"store_unavailable"} and stateless.status_code == 200
          and final.get("status") in TERMINAL and recovered < 30)
    return Outcome(client, what, 0, twice(sim_stats(sim), "full-"), ok)


# -- a replica killed mid-stream ---------------------------------------------------------------

def replica_killed(running: Lab) -> Outcome:
    sims = [running.keep(start_simulator()) for _ in range(2)]
    store = Redis(running)
    proxy = running.keep(start_proxy([s.url for s in sims], redis_url=store.url))
    readers = [Reader(proxy.url + "/v1/responses",
                      {"model": MODEL, "stream": True,
                       "input": f"replica-{i} [[sim tokens=300 delay_ms=20]]"})
               for i in range(8)]
    for reader in readers:
        reader.start()
    wait_for(lambda: all(r.deltas() >= 3 for r in readers), 30)
    victim = sims[1]
    on_victim = sim_stats(victim)["streams_started"]
    victim.kill()  # SIGKILL
    for reader in readers:
        reader.join(60)
    ends = Counter(r.last() for r in readers)
    after = [post(proxy.url, f"replica-after {i}").status_code for i in range(20)]
    kept = [stored(proxy.url, r.response_id()).get("status") for r in readers if r.events]
    same = sum(replay(proxy.url, r.response_id()) == r.events for r in readers if r.events)
    client = (f"{on_victim} of 8 live streams were on the killed replica; the streams ended "
              f"{dict(ends)}; 20 new creates after the kill: {statuses(after)} (a refused "
              "connection is retried on the other replica)")
    what = f"stored {dict(Counter(kept))}; {same}/8 replays equal what the client saw"
    lost = sum(1 for r in readers if r.last() == "response.completed"
               and stored(proxy.url, r.response_id()).get("status") != "completed")
    ok = (set(after) == {200} and ends.get("response.failed", 0) == on_victim and same == 8
          and lost == 0)
    return Outcome(client, what, lost, twice(sim_stats(sims[0]), "replica-"), ok)


# -- a worker killed -9 mid-stream -------------------------------------------------------------

def worker_killed(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    front = running.keep(start_proxy(sim.url, "--no-worker", redis_url=store.url))
    first = running.keep(start_worker(sim.url, store.url, "--heartbeat-interval", "0.5",
                                      "--worker-concurrency", "2"))
    jobs = [post(front.url, f"worker-long {i} [[sim tokens=2000 delay_ms=10]]",
                 background=True).json()["id"] for i in range(2)]
    jobs += [post(front.url, f"worker-queued {i} [[sim tokens=5]]", background=True).json()["id"]
             for i in range(6)]
    follower = Reader(f"{front.url}/v1/responses/{jobs[0]}?stream=true")
    follower.start()
    wait_for(lambda: follower.deltas() >= 5, 30)
    first.kill()  # SIGKILL, with output already streamed
    second = running.keep(start_worker(sim.url, store.url, "--heartbeat-interval", "0.5"))
    wait_for(lambda: all(stored(front.url, j).get("status") in TERMINAL for j in jobs), 90,
             every=0.2)
    follower.join(30)
    ends = [stored(front.url, j).get("status") for j in jobs]
    never = sum(1 for s in ends if s not in TERMINAL)
    replays_ok = sum(dense(replay(front.url, j)) for j in jobs)
    client = (f"the follower of a running job saw {follower.deltas()} deltas then "
              f"{follower.last()}; 6 queued jobs taken over by a new worker")
    what = (f"jobs: {dict(Counter(ends))}; {replays_ok}/8 replays densely numbered; never "
            "stuck in_progress")
    stats = sim_stats(sim)
    ok = (never == 0 and ends[:2] == ["failed", "failed"] and ends[2:] == ["completed"] * 6
          and follower.last() == "response.failed" and replays_ok == 8)
    second.stop()
    return Outcome(client, what, never, twice(stats, "worker-"), ok)


# -- a proxy instance killed -9 mid-stream -----------------------------------------------------

def proxy_killed(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    a = running.keep(start_proxy(sim.url, "--lease-ttl", "2", redis_url=store.url))
    b = running.keep(start_proxy(sim.url, "--lease-ttl", "2", "--no-worker",
                                 redis_url=store.url))
    writer = Reader(a.url + "/v1/responses", {"model": MODEL, "stream": True,
                                              "input": "proxy-kill [[sim tokens=400 "
                                              "delay_ms=50]]"})
    writer.start()
    wait_for(lambda: writer.deltas() >= 5, 30)
    response_id = writer.response_id()
    tail = Reader(f"{b.url}/v1/responses/{response_id}?stream=true")
    tail.start()
    wait_for(lambda: tail.deltas() >= 5, 30)
    a.kill()
    killed = time.monotonic()
    wait_for(lambda: stored(b.url, response_id).get("status") in TERMINAL, 30, every=0.2)
    closed_after = time.monotonic() - killed
    tail.join(30)
    final = stored(b.url, response_id)
    again = replay(b.url, response_id)
    client = (f"the writer's client: cut after {writer.deltas()} deltas ({writer.error or 'EOF'}"
              f"); a follower on B: {tail.last()}")
    what = (f"{final.get('status')} {closed_after:.1f}s after the kill (lease 2 s); replay on B "
            f"ends {again[-1]['type'] if again else '-'}, dense: {dense(again)}")
    ok = (final.get("status") == "failed" and tail.last() == "response.failed" and dense(again))
    return Outcome(client, what, 0, twice(sim_stats(sim), "proxy-kill"), ok)


# -- the network to a replica stalls -----------------------------------------------------------

def network_stall(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    link = Forwarder(sim.port).start()
    running.on_close(link.stop)
    proxy = running.keep(start_proxy(link.url, "--first-token-timeout", "2", "--idle-timeout",
                                     "2", "--first-byte-timeout", "2", redis_url=store.url))
    reader = Reader(proxy.url + "/v1/responses", {"model": MODEL, "stream": True,
                                                  "input": "stall [[sim tokens=400 "
                                                  "delay_ms=20]]"})
    reader.start()
    wait_for(lambda: reader.deltas() >= 5, 30)
    link.stall()
    stalled = time.monotonic()
    reader.join(60)
    ended_after = time.monotonic() - stalled
    plain = post(proxy.url, "stall-plain")
    link.resume()
    after = post(proxy.url, "stall-after")
    final = stored(proxy.url, reader.response_id())
    same = replay(proxy.url, reader.response_id()) == reader.events
    client = (f"mid-stream: {reader.last()} {ended_after:.1f}s into the stall (idle timeout "
              f"2 s); a non-streamed create while stalled: {plain.status_code}; after: "
              f"{after.status_code}")
    what = f"{final.get('status')}; replay equals the stream: {same}"
    ok = (reader.last() == "response.failed" and final.get("status") == "failed" and same
          and plain.status_code == 504 and after.status_code == 200)
    return Outcome(client, what, 0, twice(sim_stats(sim), "stall"), ok)


# -- a client that never reads -----------------------------------------------------------------

def never_reads(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    proxy = running.keep(start_proxy(sim.url, "--send-timeout", "1", redis_url=store.url))
    before = sim_stats(sim)
    data = orjson.dumps({"model": MODEL, "stream": True,
                         "input": "never-reads [[sim tokens=100000 delay_ms=0.1]]"})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", proxy.port))
    running.on_close(sock.close)
    sock.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json"
                 b"\r\nauthorization: Bearer sk-reliability\r\ncontent-length: %d\r\n\r\n%s"
                 % (len(data), data))
    aborted = wait_for(lambda: sim_stats(sim)["streams_aborted"] > before["streams_aborted"],
                       60, every=0.2)
    # The response's id, from what the socket holds (the created event comes first).
    sock.settimeout(5)
    head = b""
    while b"resp_" not in head and len(head) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    start = head.find(b"resp_")
    response_id = head[start:start + 53].split(b'"')[0].decode() if start >= 0 else ""
    wait_for(lambda: stored(proxy.url, response_id).get("status") in TERMINAL, 30, every=0.2)
    final = stored(proxy.url, response_id) if response_id else {"status": "?"}
    client = "dropped after the 1 s send deadline (--send-timeout 1)"
    what = (f"{final.get('status')}; simulator: upstream aborted {aborted} "
            f"(streams_aborted +{sim_stats(sim)['streams_aborted'] - before['streams_aborted']})")
    ok = aborted and final.get("status") in TERMINAL
    return Outcome(client, what, 0, twice(sim_stats(sim), "never-reads"), bool(ok))


# -- a thousand readers of one response --------------------------------------------------------

READERS = 1000
RAMP = 1.0  # seconds over which the readers arrive


def thousand_readers(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    proxy = running.keep(start_proxy(sim.url, redis_url=store.url))
    pid = pid_of(proxy)
    writer = Reader(proxy.url + "/v1/responses", {"model": MODEL, "stream": True,
                                                  "input": "thousand [[sim tokens=300 "
                                                  "delay_ms=20]]"})
    writer.start()
    wait_for(lambda: writer.deltas() >= 3, 30)
    response_id = writer.response_id()
    rss0, cpu0, t0 = rss_bytes(pid), cpu_seconds(pid), time.monotonic()
    peak = [rss0]

    async def one(http: httpx.AsyncClient) -> bytes:
        async with http.stream("GET", f"/v1/responses/{response_id}",
                               params={"stream": "true"}) as response:
            return b"".join([chunk async for chunk in response.aiter_bytes()])

    async def everyone() -> list[bytes | BaseException]:
        limits = httpx.Limits(max_connections=READERS, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=proxy.url, headers=AUTH, timeout=180,
                                     limits=limits) as http:
            async def watch() -> None:
                while True:
                    peak[0] = max(peak[0], rss_bytes(pid))
                    await asyncio.sleep(0.5)

            watcher = asyncio.create_task(watch())
            try:
                readers = []
                for _ in range(READERS):  # arriving over about a second, not in one tick
                    readers.append(asyncio.create_task(one(http)))
                    await asyncio.sleep(RAMP / READERS)
                return await asyncio.gather(*readers, return_exceptions=True)
            finally:
                watcher.cancel()

    bodies = asyncio.run(everyone())
    elapsed, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
    writer.join(60)
    reference = replay(proxy.url, response_id)
    parsed = [[orjson.loads(line[6:]) for line in b.decode().splitlines()
               if line.startswith("data: ")] if isinstance(b, bytes) else None for b in bodies]
    identical = sum(p == reference for p in parsed)
    complete = sum(p is not None and bool(p) and p[-1]["type"] == "response.completed"
                   for p in parsed)
    client = (f"{READERS} concurrent replays (arriving over {RAMP:.0f} s) joined mid-stream: "
              f"{identical} identical to the "
              f"stored log ({len(reference)} events), {complete} complete, "
              f"{sum(p is None for p in parsed)} errors")
    what = (f"{stored(proxy.url, response_id).get('status')}; proxy RSS {rss0 >> 20} MiB -> "
            f"peak {peak[0] >> 20} MiB; proxy CPU {cpu:.1f}s over {elapsed:.1f}s")
    ok = identical == READERS and reference == writer.events
    return Outcome(client, what, READERS - identical, 0, ok)


# -- inputs at every size limit ----------------------------------------------------------------

LIMIT = 64 * 1024


def size_limits(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    proxy = running.keep(start_proxy(sim.url, "--max-body-bytes", str(LIMIT),
                                     redis_url=store.url))

    def body_of(size: int) -> bytes:
        empty = orjson.dumps({"model": MODEL, "input": "", "store": False})
        return orjson.dumps({"model": MODEL, "input": "x" * (size - len(empty)),
                             "store": False})

    def send(raw: bytes) -> int:
        return httpx.post(proxy.url + "/v1/responses", content=raw, timeout=60,
                          headers={**AUTH, "content-type": "application/json"}).status_code

    def items(n: int) -> int:
        many = [{"role": "user", "content": "hi"}] * n
        return post(proxy.url, "", input=many, store=False).status_code

    def metadata(keys: int, key_len: int, value_len: int) -> int:
        data = {f"{i:0{key_len}d}": "v" * value_len for i in range(keys)}
        return post(proxy.url, "limits meta", metadata=data, store=False).status_code

    cases = {
        f"body {LIMIT} B (at --max-body-bytes)": (send(body_of(LIMIT)), 200),
        f"body {LIMIT + 1} B": (send(body_of(LIMIT + 1)), 413),
        "2048 input items": (items(2048), 200),
        "2049 input items": (items(2049), 400),
        "metadata 16 keys": (metadata(16, 64, 512), 200),
        "metadata 17 keys": (metadata(17, 2, 1), 400),
        "metadata key 65 chars": (metadata(1, 65, 1), 400),
        "metadata value 513 chars": (metadata(1, 2, 513), 400),
    }
    bad = [name for name, (got, want) in cases.items() if got != want]
    client = "; ".join(f"{name}: {got}" for name, (got, _) in cases.items())
    return Outcome(client, "nothing (store: false); no 500", 0, 0, not bad)


# -- an MCP server dies mid-call -----------------------------------------------------------

def mcp_server_killed(running: Lab) -> Outcome:
    sim = running.keep(start_simulator())
    store = Redis(running)
    tools = running.keep(start_mcp_server())
    # The call's own bound is far above what the kill should take: a failure comes from the
    # dead connection, not from the timeout.
    proxy = running.keep(start_proxy(sim.url, "--mcp-allow", "http://127.0.0.1",
                                     "--mcp-timeout", "60", redis_url=store.url))
    reader = Reader(proxy.url + "/v1/responses", {
        "model": MODEL, "stream": True,
        "input": 'mcp-kill [[sim call=slow call_args={"seconds":50}]]',
        "tools": [{"type": "mcp", "server_label": "tools", "server_url": f"{tools.url}/mcp",
                   "require_approval": "never"}]})
    reader.start()
    started = wait_for(lambda: any(e.get("type") == "response.mcp_call.in_progress"
                                   for e in reader.events), 30)
    time.sleep(0.5)  # the call's request is at the server, `slow` sleeping in it
    tools.kill()
    killed = time.monotonic()
    reader.join(90)
    ended_after = time.monotonic() - killed
    kinds = [str(e.get("type")) for e in reader.events]
    final = stored(proxy.url, reader.response_id()) if reader.events else {}
    calls = [i for i in final.get("output", []) if i.get("type") == "mcp_call"]
    same = bool(reader.events) and replay(proxy.url, reader.response_id()) == reader.events
    after = post(proxy.url, "mcp-kill-after")
    failed = "response.mcp_call.failed" if "response.mcp_call.failed" in kinds else "no failure"
    client = (f"the call in progress when the server was SIGKILLed: {failed}"
              f" then {reader.last()} {ended_after:.1f}s after the kill (`--mcp-timeout 60`); "
              f"a create without MCP after: {after.status_code}")
    error = calls[0].get("error") if calls else None
    what = (f"{final.get('status')}; mcp_call {calls[0].get('status') if calls else 'missing'}"
            f" ({error.get('type') if isinstance(error, dict) else error}); replay equals the "
            f"stream: {same}")
    # A tool loop asks the model twice by design (the call, then the answer with its result):
    # "twice" here is a third time.
    counts = sim_stats(sim)["prompt_counts"]
    asked = counts.get("mcp-kill", 0) if isinstance(counts, dict) else 0
    ok = (started and failed != "no failure" and reader.last() == "response.completed"
          and final.get("status") == "completed" and len(calls) == 1
          and calls[0].get("status") == "failed" and same and after.status_code == 200
          and ended_after < 30 and asked == 2)
    return Outcome(client, what, 0, int(asked > 2), ok)


def failover_row(wait_replicas: int) -> Callable[[Lab], Outcome]:
    return topology_row(sentinel_primary_killed(wait_replicas))


def topology_row(scenario: Callable[[Lab], tuple[str, str, int, bool]],
                 ) -> Callable[[Lab], Outcome]:
    """A Redis topology's row (reliability/failover.py, clusterfailover.py) as an Outcome."""
    def run(running: Lab) -> Outcome:
        client, what, lost, ok = scenario(running)
        return Outcome(client, what, lost, 0, ok)

    return run


SCENARIOS = (
    Scenario("redis-restart-aof", "Redis SIGKILLed under load (16 clients), restarted on the "
             "same port about 1 s later with its AOF (appendfsync always)", redis_restart(True)),
    Scenario("redis-restart-no-persistence", "the same, Redis without persistence (the test "
             "default)", redis_restart(False)),
    Scenario("redis-full", "Redis `maxmemory` reached (noeviction) with a stream running, "
             "freed 2 s after it ended", redis_full),
    Scenario("replica-killed", "one of two simulator replicas SIGKILLed under 8 live streams",
             replica_killed),
    Scenario("worker-killed", "a `worker` SIGKILLed with 2 jobs streaming and 6 queued, a new "
             "worker started", worker_killed),
    Scenario("proxy-killed", "instance A SIGKILLed mid-stream, a follower tailing on B",
             proxy_killed),
    Scenario("network-stall", "the TCP forwarder to the only replica stops forwarding "
             "mid-stream", network_stall),
    Scenario("never-reads", "a client that sends a stream request and never reads",
             never_reads),
    Scenario("thousand-readers", f"{READERS} readers replaying one live response",
             thousand_readers),
    Scenario("size-limits", "inputs exactly at and one over each size limit", size_limits),
    Scenario("sentinel-primary-killed", "the Sentinel primary SIGKILLed under load (8 "
             "create clients, 8 stream clients, a job every 100 ms; two instances and a "
             f"worker), its replica lagging {LAG}s", failover_row(0)),
    Scenario("sentinel-primary-killed-wait", "the same with --redis-wait-replicas 1",
             failover_row(1)),
    *(Scenario(name, fault, topology_row(run)) for name, fault, run in CLUSTER_ROWS),
    Scenario("mcp-server-killed", "the MCP server SIGKILLed while the proxy waits on a tool "
             "call of a streamed response", mcp_server_killed),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the scenarios whose name contains this")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table too")
    args = parser.parse_args(argv)
    rows: list[tuple[Scenario, Outcome]] = []
    for scenario in SCENARIOS:
        if args.only not in scenario.name:
            continue
        started = time.monotonic()
        print(f"== {scenario.name}: {scenario.fault}", flush=True)
        try:
            with lab() as running:
                outcome = scenario.run(running)
        except Exception as exc:  # a scenario that breaks is a failed scenario, not a crash
            outcome = Outcome(f"harness error: {type(exc).__name__}: {exc}", "-", 0, 0, False)
        rows.append((scenario, outcome))
        print(f"   client:  {outcome.client}\n   stored:  {outcome.stored}\n"
              f"   lost: {outcome.lost}  run twice: {outcome.twice}  "
              f"{'OK' if outcome.ok else 'FAILED'}  ({time.monotonic() - started:.0f}s)",
              flush=True)
    if args.markdown:
        print("\n| scenario | fault | the client saw | stored afterwards | lost | twice |\n"
              "|---|---|---|---|---|---|")
        for scenario, o in rows:
            print(f"| {scenario.name} | {scenario.fault} | {o.client} | {o.stored} | {o.lost} "
                  f"| {o.twice} |")
    failed = [s.name for s, o in rows if not o.ok]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} scenarios as expected"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the children on a TERM too
    sys.exit(main())
