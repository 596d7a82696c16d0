"""`make soak`: mixed traffic at concurrency 64 against two instances sharing one Redis, for
`SOAK_SECONDS` (default 300), sampled every `--every` seconds for what would show a leak.

    SOAK_SECONDS=300 python -m reliability.soak [--concurrency 64] [--every 10]

The stack: one simulator, one redis-server (no persistence), two `serve` instances (each with
its in-process worker) with `--cache exact` and TTLs scaled to the run (responses a fifth of
it, event logs and cache entries a tenth), so that within the run keys expire as fast as they
are made and Redis's key count levels off. Traffic: the kinds registered in
reliability/traffic.py, drawn by weight by 64 concurrent loops; for the `mcp` kind a real MCP
server (tests/support/mcp_server.py) on loopback, which the instances may call
(`--mcp-allow http://127.0.0.1`).

Sampled per instance: resident memory (/proc/pid/statm), open file descriptors (/proc/pid/fd),
TCP connections (/proc/net/tcp matched to the process's sockets), asyncio tasks (the
`proxy_event_loop_tasks` gauge of /metrics); for Redis: DBSIZE and used_memory. After the load
stops, the same once the instances are idle: connections and tasks back to their idle level.

Verdicts (exit 1 if one fails): resident memory grows less than `RSS_GROWTH` over the last half
of the run; fds, connections and tasks under load no higher in the last half than in the first
plus a margin, by each half's floor (MCP calls in flight make the peaks swing);
Redis keys over the last half no more than `KEYS_GROWTH` above the first half's peak (bounded
by the TTLs, not growing with time); every answer a 2xx or a documented refusal (no 5xx),
every MCP call with its result; after the load, no task and no connection left over.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import redis

from reliability.lab import AUTH, Lab, Redis, lab, open_fds, pid_of, rss_bytes, tcp_connections
from reliability.traffic import KINDS, Ctx, Kind
from tests.support.servers import ServerProcess, start_mcp_server, start_proxy, start_simulator

RSS_GROWTH = 0.10  # at most 10% more resident memory at the end than at mid-run
PERSISTENT_KEYS = 16  # keys without a TTL: a handful of per-deployment structures
# What the load's own jitter may add to a per-process count in the last half.
FD_MARGIN, CONN_MARGIN, TASK_MARGIN = 32, 32, 64
REDIS_POOL = 64  # proxy/store/connection/factory.py MAX_CONNECTIONS
TASKS_IDLE_SLACK = 4


@dataclass
class Sample:
    at: float
    rss: list[int]
    fds: list[int]
    conns: list[Counter[str]]  # by peer: clients (inbound), redis, replica, mcp
    tasks: list[int]
    keys: int
    keys_without_ttl: Counter[str]  # by prefix (up to the first ':')
    redis_memory: int
    answers: int
    loaded: bool = True  # taken while the traffic ran


@dataclass
class Tally:
    by_kind: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # "kind status" for non-2xx
    notes: Counter[str] = field(default_factory=Counter)  # refusal messages
    errors: Counter[str] = field(default_factory=Counter)
    seen: Counter[str] = field(default_factory=Counter)  # e.g. MCP calls that ran

    def add(self, kind: Kind, codes: list[int]) -> None:
        self.by_kind[kind.name] += 1
        self.statuses.update(codes)
        self.refused.update(f"{kind.name} {code}" for code in codes if code >= 300)


def tasks_of(server: ServerProcess) -> int:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("proxy_event_loop_tasks "):
            return int(float(line.split()[1]))
    return -1


def persistent(admin: redis.Redis) -> Counter[str]:
    """Keys with no TTL, by prefix: the ones that could grow for ever (the rest expire)."""
    found: Counter[str] = Counter()
    batch: list[bytes] = []

    def check() -> None:
        pipe = admin.pipeline(transaction=False)
        for key in batch:
            pipe.ttl(key)
        for key, ttl in zip(batch, pipe.execute(), strict=True):
            if ttl == -1:
                found[key.decode(errors="replace").split(":", 1)[0]] += 1
        batch.clear()

    for key in admin.scan_iter(count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            check()
    check()
    return found


def sample(proxies: list[ServerProcess], admin: redis.Redis, started: float,
           tally: Tally, ports: dict[int, str]) -> Sample:
    pids = [pid_of(p) for p in proxies]
    memory = admin.info("memory")
    conns = [tcp_connections(pid, {**ports, proxy.port: "clients"})
             for pid, proxy in zip(pids, proxies, strict=True)]
    return Sample(time.monotonic() - started, [rss_bytes(p) for p in pids],
                  [open_fds(p) for p in pids], conns,
                  [tasks_of(p) for p in proxies], int(admin.dbsize()), persistent(admin),
                  int(memory["used_memory"]), sum(tally.statuses.values()))


async def drive(proxies: list[ServerProcess], seconds: float, concurrency: int,
                tally: Tally, seed: int, mcp_url: str) -> None:
    # Idle connections are dropped before uvicorn's 5 s keep-alive closes them: at httpx's
    # default (also 5 s) a request may go out on a connection the server is closing, a
    # ReadError that says nothing about the proxy.
    limits = httpx.Limits(max_connections=concurrency * 2,
                          max_keepalive_connections=concurrency * 2, keepalive_expiry=2.0)
    kinds = list(KINDS.values())
    weights = [k.weight for k in kinds]
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=proxies[0].url, headers=AUTH, timeout=120,
                                 limits=limits) as a, \
            httpx.AsyncClient(base_url=proxies[1].url, headers=AUTH, timeout=120,
                              limits=limits) as b:
        serial = itertools.count()

        async def loop(n: int) -> None:
            ctx = Ctx(a, b, random.Random(seed + n), serial, tally.notes, errors=tally.errors,
                      seen=tally.seen, mcp_url=mcp_url)
            while time.monotonic() < deadline:
                chosen = ctx.rng.choices(kinds, weights)[0]
                try:
                    tally.add(chosen, await chosen.run(ctx))
                except httpx.HTTPError as exc:
                    tally.errors[f"{chosen.name}: {type(exc).__name__}"] += 1

        await asyncio.gather(*(loop(n) for n in range(concurrency)))


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def total(conns: Counter[str]) -> int:
    return sum(conns.values())


def verdicts(samples: list[Sample], idle: Sample, before: Sample, tally: Tally
             ) -> list[tuple[str, bool]]:
    half = [s for s in samples if s.at >= samples[-1].at / 2]
    first = [s for s in samples if s.at < samples[-1].at / 2] or samples[:1]
    mid, end = half[0], half[-1]
    out: list[tuple[str, bool]] = []
    for i in range(len(end.rss)):
        name = f"instance {'AB'[i]}"
        growth = (end.rss[i] - mid.rss[i]) / mid.rss[i]
        out.append((f"{name}: RSS {mib(mid.rss[i])} at mid-run -> {mib(end.rss[i])} at the "
                    f"end ({growth:+.1%}; bound +{RSS_GROWTH:.0%})", growth < RSS_GROWTH))
        # Under load, by the floor of each half (its least sample while the traffic ran): an
        # MCP call holds a connection and an fd to the MCP server and several tasks (the `mcp`
        # client's session runs its own task group) for as long as it takes, so a sample's
        # count swings with how many calls are in flight at that instant, peaks 10x the floor.
        # What leaks is never released: it lifts every sample, the floor with them. The peaks
        # are printed; nothing leaked shows again in the idle check below.
        loaded_first = [s for s in first if s.loaded] or first
        loaded_half = [s for s in half if s.loaded] or half
        def counts(part: list[Sample], n: int = i) -> dict[str, list[int]]:
            return {"fds": [s.fds[n] for s in part],
                    "TCP connections": [total(s.conns[n]) for s in part],
                    "asyncio tasks": [s.tasks[n] for s in part]}

        margins = {"fds": FD_MARGIN, "TCP connections": CONN_MARGIN,
                   "asyncio tasks": TASK_MARGIN}
        early_of, late_of = counts(loaded_first), counts(loaded_half)
        for label, margin in margins.items():
            early, late = early_of[label], late_of[label]
            out.append((f"{name}: {label} floor {min(early)} in the first half, {min(late)} in "
                        f"the last (bound +{margin}; peaks {max(early)}/{max(late)})",
                        min(late) <= min(early) + margin))
        # Idle again: no client connection left open, the Redis pool within its bound (it
        # keeps what it opened, up to 64), the event loop back to its own tasks.
        gone = idle.conns[i]["clients"] == 0
        pooled = idle.conns[i]["redis"] <= REDIS_POOL
        calm = idle.tasks[i] <= before.tasks[i] + TASKS_IDLE_SLACK
        out.append((f"{name}: 5 s after the load: client connections {idle.conns[i]['clients']}"
                    f", Redis {idle.conns[i]['redis']} (pool bound {REDIS_POOL}), replica "
                    f"{idle.conns[i]['replica']} (keep-alive), MCP {idle.conns[i]['mcp']}, fds "
                    f"{idle.fds[i]}, tasks "
                    f"{idle.tasks[i]} (before the load: {before.tasks[i]})",
                    gone and pooled and calm))
    # Every key a request makes carries a TTL; the few without one are per-deployment
    # structures (the job stream, the lease set...) whose number must not grow with traffic.
    fixed_mid, fixed_end = sum(mid.keys_without_ttl.values()), sum(end.keys_without_ttl.values())
    out.append((f"Redis keys: {mid.keys} at mid-run, {end.keys} at the end, peak "
                f"{max(s.keys for s in samples)}; without a TTL: {fixed_mid} at mid-run, "
                f"{fixed_end} at the end {dict(end.keys_without_ttl)}; used_memory "
                f"{mib(mid.redis_memory)} -> {mib(end.redis_memory)}",
                fixed_end <= fixed_mid and fixed_end <= PERSISTENT_KEYS))
    server_errors = sum(n for code, n in tally.statuses.items() if code >= 500)
    out.append((f"answers by status: {dict(sorted(tally.statuses.items()))}; refusals: "
                f"{dict(tally.refused) or 'none'}; client errors: {dict(tally.errors) or 'none'}",
                server_errors == 0 and not tally.errors))
    return out


def run(seconds: float, concurrency: int, every: float, seed: int) -> int:
    with lab() as running:
        return soak(running, seconds, concurrency, every, seed)


def ttl_flags(seconds: float) -> tuple[str, ...]:
    """TTLs short enough that keys expire well within the run: a fifth of it for responses
    and conversations, a tenth for event logs and cache entries (at least 10 s)."""
    long, short = max(10, int(seconds / 5)), max(10, int(seconds / 10))
    return ("--response-ttl", str(long), "--event-ttl", str(short), "--cache-ttl", str(short))


def soak(running: Lab, seconds: float, concurrency: int, every: float, seed: int) -> int:
    sim = running.keep(start_simulator())
    tools = running.keep(start_mcp_server())
    store = Redis(running)
    # The instances may call the MCP server on loopback (the `mcp` kind's tool).
    flags = ("--cache", "exact", "--mcp-allow", "http://127.0.0.1", *ttl_flags(seconds))
    proxies = [running.keep(start_proxy(sim.url, *flags, redis_url=store.url))
               for _ in range(2)]
    admin = redis.Redis(port=store.port)
    running.on_close(admin.close)
    ports = {store.port: "redis", sim.port: "replica", tools.port: "mcp"}
    tally = Tally()
    started = time.monotonic()
    before = sample(proxies, admin, started, tally, ports)
    samples: list[Sample] = []
    failure: list[BaseException] = []

    def traffic() -> None:
        try:
            asyncio.run(drive(proxies, seconds, concurrency, tally, seed, f"{tools.url}/mcp"))
        except BaseException as exc:  # reported below, the verdicts still printed
            failure.append(exc)

    driver = threading.Thread(target=traffic, daemon=True, name="soak-traffic")
    driver.start()
    print(f"soak: {seconds:.0f}s, concurrency {concurrency}, 2 instances {' '.join(flags)}; "
          f"kinds {', '.join(f'{k.name}x{k.weight}' for k in KINDS.values())}", flush=True)
    print("    t  rss A/B (MiB)  fds A/B  conns A/B  tasks A/B   keys  redis MiB  answers",
          flush=True)
    while driver.is_alive():
        driver.join(every)
        s = sample(proxies, admin, started, tally, ports)
        s.loaded = driver.is_alive()
        samples.append(s)
        print(f"{s.at:5.0f}  {s.rss[0] / 2**20:5.1f}/{s.rss[1] / 2**20:5.1f}  "
              f"{s.fds[0]:4d}/{s.fds[1]:<4d} {total(s.conns[0]):4d}/{total(s.conns[1]):<4d}  "
              f"{s.tasks[0]:4d}/{s.tasks[1]:<4d} {s.keys:6d}  {s.redis_memory / 2**20:8.1f}  "
              f"{s.answers:7d}", flush=True)
    if failure:
        tally.errors[f"traffic driver: {failure[0]!r}"] += 1
    time.sleep(5)  # let the last streams end and the clients' keep-alives close
    idle = sample(proxies, admin, started, tally, ports)
    print(f"interactions by kind: {dict(tally.by_kind)}; {dict(tally.seen)}")
    if tally.notes:
        print(f"refusal messages: {dict(tally.notes)}")
    results = verdicts(samples, idle, before, tally) if len(samples) >= 2 else \
        [("fewer than two samples: run longer", False)]
    for line, ok in results:
        print(f"{'ok  ' if ok else 'FAIL'} {line}")
    return 0 if all(ok for _, ok in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float,
                        default=float(os.environ.get("SOAK_SECONDS", "300")))
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.concurrency <= 0 or args.every <= 0:
        parser.error("--seconds, --concurrency and --every must be positive")
    return run(args.seconds, args.concurrency, args.every, args.seed)


if __name__ == "__main__":
    sys.exit(main())
