"""`make chaos` rows for a Sentinel failover: the primary SIGKILLed under load, with
and without `--redis-wait-replicas 1`.

Topology: a primary, a replica and three sentinels (tests/support/sentinel.py); two proxy
instances (A takes creates and background jobs, B streams) and a worker process, all on
`redis+sentinel://`, leases of 5 s (longer than the failover: FLAGS says why). Load: 8
clients of stored creates, 8 of stored streams, one background job every 100 ms.

Replication is asynchronous, and on loopback it is sub-millisecond, so a plain kill loses
nothing measurable. To show what a failover can lose, the replica's replication link runs
through a forwarder that is stalled for `LAG` seconds before the primary is killed (a replica
that lags, as one does on a busy network): whatever the primary acknowledged in that window
never reaches the replica that gets promoted. With `--redis-wait-replicas 1` a response's
create and its final write are acknowledged only once the replica has them (or after 1 s,
counted): an answer or a job id given is then on the replica.

Counted: "acknowledged" = a create answered 200 completed, a stream that reached
`response.completed`, a job answered 200 queued. "Lost" = acknowledged and then not found as
it was (404, or not completed). "Left" = a response or job still queued/in_progress 15 s after
the load stopped (the lease sweep and the job reclaim run well within that).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from reliability.forwarder import Forwarder
from reliability.lab import AUTH, Lab, stored, wait_for
from tests.support.sentinel import SentinelGroup
from tests.support.servers import start_proxy, start_simulator, start_worker

MODEL = "sim-model"
LAG = 0.5  # seconds the replica falls behind before the primary is killed
AFTER = 8.0  # seconds of load after the kill
# Leases longer than the failover (about 2.5 s here: 1 s to notice, then the election): a lease
# that expires while the primary is out lets another instance's sweep close a response its
# writer is still finishing (that writer is then told to stop), so an answer a client got could
# be stored failed. In production: --lease-ttl above Sentinel's down-after-milliseconds plus
# the failover time.
FLAGS = ("--no-worker", "--lease-ttl", "5")


@dataclass
class Seen:
    """Everything the clients saw, appended from the load's thread."""

    # (sent, status code, body) on the monotonic clock
    creates: list[tuple[float, float, int, dict[str, Any]]] = field(default_factory=list)
    streams: list[tuple[str, str]] = field(default_factory=list)  # (outcome, response id)
    jobs: list[tuple[int, str]] = field(default_factory=list)  # (status code, id)


class FailoverLoad:
    def __init__(self, creates_url: str, streams_url: str, tag: str) -> None:
        self.creates_url, self.streams_url, self.tag = creates_url, streams_url, tag
        self.seen = Seen()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._all()), daemon=True)

    async def _loop(self, base: str, step: Callable[[httpx.AsyncClient, int], Awaitable[None]],
                    pause: float = 0.0) -> None:
        """`step(http, i)` for i = 0, 1, ... until stopped (bounded in count too)."""
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as http:
            for i in range(100_000):
                if self._stop.is_set():
                    return
                await step(http, i)
                await asyncio.sleep(pause)

    async def _create(self, http: httpx.AsyncClient, name: str) -> None:
        sent = time.monotonic()
        try:
            got = await http.post("/v1/responses", json={
                "model": MODEL, "input": f"{self.tag} {name} [[sim tokens=20]]"})
            self.seen.creates.append((sent, time.monotonic(), got.status_code, got.json()))
        except (httpx.HTTPError, ValueError):
            self.seen.creates.append((sent, time.monotonic(), 0, {}))

    async def _stream(self, http: httpx.AsyncClient, name: str) -> None:
        self.seen.streams.append(await self._read_stream(http, name))

    async def _read_stream(self, http: httpx.AsyncClient, name: str) -> tuple[str, str]:
        rid, last = "", "(nothing)"
        try:
            async with http.stream("POST", "/v1/responses", json={
                    "model": MODEL, "stream": True,
                    "input": f"{self.tag} {name} [[sim tokens=30 delay_ms=10]]"}) as got:
                if got.status_code != 200:
                    return f"HTTP {got.status_code}", ""
                async for line in got.aiter_lines():
                    if line.startswith("data: "):
                        event = orjson.loads(line[6:])
                        last = str(event.get("type"))
                        rid = rid or str(event.get("response", {}).get("id", ""))
        except httpx.TimeoutException:
            return "hung", rid
        except httpx.HTTPError:
            return "cut", rid
        return last, rid

    async def _job(self, http: httpx.AsyncClient, i: int) -> None:
        try:
            got = await http.post("/v1/responses", json={
                "model": MODEL, "background": True,
                "input": f"{self.tag} j{i} [[sim tokens=20]]"})
            self.seen.jobs.append((got.status_code, str(got.json().get("id", ""))))
        except (httpx.HTTPError, ValueError):
            self.seen.jobs.append((0, ""))

    async def _all(self) -> None:
        def create(n: int) -> Callable[[httpx.AsyncClient, int], Awaitable[None]]:
            return lambda http, i: self._create(http, f"c{n}-{i}")

        def stream(n: int) -> Callable[[httpx.AsyncClient, int], Awaitable[None]]:
            return lambda http, i: self._stream(http, f"s{n}-{i}")

        await asyncio.gather(*(self._loop(self.creates_url, create(n)) for n in range(8)),
                             *(self._loop(self.streams_url, stream(n)) for n in range(8)),
                             self._loop(self.creates_url, self._job, 0.1))

    def start(self) -> FailoverLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


@dataclass
class Tally:
    acknowledged: int = 0
    lost: int = 0
    left: int = 0


def sentinel_primary_killed(wait_replicas: int) -> Callable[[Lab], tuple[str, str, int, bool]]:
    """The scenario; returns (what the client saw, what is stored, lost, ok)."""
    def run(running: Lab) -> tuple[str, str, int, bool]:
        forwarders: list[Forwarder] = []

        def link(primary_port: int) -> int:
            forwarders.append(Forwarder(primary_port).start())
            return forwarders[-1].port

        group = SentinelGroup(link=link)
        running.on_close(group.stop)
        running.on_close(lambda: [f.stop() for f in forwarders])
        url = group.url()
        flags = (*FLAGS, "--redis-wait-replicas", str(wait_replicas))
        sim = running.keep(start_simulator())
        a = running.keep(start_proxy(sim.url, *flags, redis_url=url))
        b = running.keep(start_proxy(sim.url, *flags, redis_url=url))
        running.keep(start_worker(sim.url, url, "--heartbeat-interval", "0.5"))
        load = FailoverLoad(a.url, b.url, f"failover-wait={wait_replicas}").start()
        running.on_close(load.stop)
        wait_for(lambda: len(load.seen.creates) >= 200, 60)
        old = group.master_port()
        assert old is not None
        forwarders[0].stall()  # the replica falls behind...
        time.sleep(LAG)
        killed = time.monotonic()
        group.fail_primary(signal.SIGKILL)  # ...and the primary dies with what it did not send
        forwarders[0].stop()
        group.wait_promoted(old)
        promoted = time.monotonic() - killed
        time.sleep(AFTER)
        load.stop()
        time.sleep(15)  # the lease sweep (5 s leases) and the job reclaim (0.5 s heartbeats)
        return judge(load.seen, b.url, killed, promoted, wait_replicas)

    return run


def judge(seen: Seen, base: str, killed: float, promoted: float, wait_replicas: int, *,
          event: str = "replica promoted", fault: str = "the kill") -> tuple[str, str, int, bool]:
    """`killed`: when the fault began; `promoted`: seconds until `event` (the fault over)."""
    creates, streams, jobs = Tally(), Tally(), Tally()
    how: Counter[str] = Counter()  # what the lost answers are stored as now
    ids = {str(body["id"]) for *_, body in seen.creates if body.get("id")}
    ids |= {rid for _, rid in seen.streams if rid} | {rid for _, rid in seen.jobs if rid}
    with ThreadPoolExecutor(16) as pool:  # thousands of GETs: not one after another
        now = dict(zip(ids, pool.map(lambda rid: stored(base, rid).get("status"), ids),
                       strict=True))
    answers = [(code == 200 and body.get("status") == "completed", now.get(str(body.get("id"))))
               for _, _, code, body in seen.creates]
    for tally, given in ((creates, answers), (streams, [
            (outcome == "response.completed", now.get(rid)) for outcome, rid in seen.streams])):
        for acknowledged, status in given:
            if acknowledged:
                tally.acknowledged += 1
                tally.lost += status != "completed"
                if status != "completed":
                    how[str(status)] += 1
            tally.left += status == "in_progress"
    for code, rid in seen.jobs:
        if code == 200 and rid:
            jobs.acknowledged += 1
            status = now.get(rid)
            jobs.lost += str(status).startswith("HTTP")
            jobs.left += status in ("queued", "in_progress")
    # service resumed: the first create sent after the kill that was answered 200
    resumed = min((done for sent, done, code, _ in seen.creates
                   if sent > killed and code == 200), default=0.0)
    outcomes = Counter(o for o, _ in seen.streams)
    client = (f"creates: {_codes(c for _, _, c, _ in seen.creates)}; streams: "
              f"{', '.join(f'{n}x {o}' for o, n in outcomes.most_common())}; jobs: "
              f"{_codes(c for c, _ in seen.jobs)}; {event} {promoted:.1f}s after {fault}, a "
              f"create sent after {fault} began answered 200 "
              + (f"{resumed - killed:.1f}s after it" if resumed else "never"))
    what = (f"acknowledged and lost: creates {creates.lost}/{creates.acknowledged}, streams "
            f"{streams.lost}/{streams.acknowledged}, jobs {jobs.lost}/{jobs.acknowledged}"
            f"{' (' + _codes(how.elements()) + ')' if how else ''}; "
            f"left in_progress/queued: {creates.left + streams.left + jobs.left}")
    lost = creates.lost + streams.lost + jobs.lost
    hung = outcomes.get("hung", 0)
    # With WAIT (after a response's create and its final write) nothing acknowledged is lost.
    ok = (resumed > 0 and hung == 0 and creates.left + streams.left + jobs.left == 0
          and (not wait_replicas or lost == 0))
    return client, what, lost, ok


def _codes(codes: Any) -> str:
    return ", ".join(f"{n}x{code}" for code, n in sorted(Counter(codes).items()))
