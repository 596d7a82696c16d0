"""`python -m bench.fleet` (run by `make bench` after the other rows): what routing is worth on
a fleet whose replicas cache prompt prefixes.

Servers: one redis-server, three simulators with the prefix cache's prefill cost on
(`--prefill-ms-per-token`), and one proxy per routing policy (`--routing affinity`, the
default; `round_robin`; `least_loaded`), all on the same three simulators. Workload per row:
`--conversations` conversations at once (their starts spread over `--ramp-seconds`), each
`--turns` turns in sequence, chained with `previous_response_id` (stored, streamed), every one
opening with the same long instructions (the shared system prompt), each turn a new user
message and a short answer. The policies run
one after another on the same simulators, reset (counters and prefix caches) before each row,
so every row starts cold. Then the same again with the third simulator made slow (4x the token
delay and the prefill cost), to show where each policy sends work when a replica lags.

Per row: TTFT p50/p99 (client side, first `response.output_text.delta`), prefix hit rate
(hit tokens / prompt tokens, summed over the simulators' `/sim/stats`), balance (the most chat
requests one simulator got over the mean), errors, wall time.

Bounded: each row stops starting turns after `--max-seconds` (turns under way finish, each
bounded by the client's timeout). The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.options import module_parser
from bench.procs import Service, free_port
from bench.stack import HOST, http_get, http_ok, redis_ok

POLICIES = ("affinity", "round_robin", "least_loaded")
DEFAULT_ROUTING = "affinity"  # `serve`'s default: its row passes no --routing
SLOW_FACTOR = 4
# The shared system prompt: long enough that caching it matters, the same for everyone.
INSTRUCTIONS = " ".join(f"Rule {n}: answer briefly, cite nothing, stay polite." for n in range(40))


@dataclass
class Row:
    scenario: str
    policy: str
    ttft_ms: list[float] = field(default_factory=list)
    errors: int = 0
    turns: int = 0
    seconds: float = 0.0
    hit_rate: float = 0.0
    per_replica: list[int] = field(default_factory=list)

    @property
    def balance(self) -> float:
        mean = statistics.fmean(self.per_replica) if self.per_replica else 0.0
        return max(self.per_replica) / mean if mean else 0.0

    def percentile(self, q: float) -> float:
        if not self.ttft_ms:
            return float("nan")
        ordered = sorted(self.ttft_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        return (f"{self.scenario:6s} {self.policy:12s} turns {self.turns:4d}  TTFT p50 "
                f"{self.percentile(0.5):7.1f} ms  p99 {self.percentile(0.99):7.1f} ms  prefix "
                f"hits {self.hit_rate:6.1%}  balance {self.balance:4.2f} "
                f"({'/'.join(str(n) for n in self.per_replica)})  errors {self.errors}  "
                f"{self.seconds:5.1f} s")


async def turn(client: httpx.AsyncClient, port: int, text: str, previous: str | None,
               tokens: int) -> tuple[str, float]:
    """One streamed, stored turn: (response id, TTFT ms)."""
    body: dict[str, Any] = {"model": "sim-model", "instructions": INSTRUCTIONS, "stream": True,
                            "input": f"{text} [[sim tokens={tokens}]]"}
    if previous:
        body["previous_response_id"] = previous
    started = time.perf_counter()
    ttft: float | None = None
    response_id: str | None = None
    completed = False
    async with client.stream("POST", f"http://{HOST}:{port}/v1/responses", json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"HTTP {reply.status_code}")
        async for line in reply.aiter_lines():
            # Parse only what we read (the client shares the machine with what it measures).
            if not line.startswith("data: ") or (ttft is not None and "response.c" not in line):
                continue
            event = orjson.loads(line[6:])
            kind = event.get("type")
            if kind == "response.created":
                response_id = event["response"]["id"]
            elif kind == "response.output_text.delta" and ttft is None:
                ttft = (time.perf_counter() - started) * 1000
            elif kind == "response.completed":
                completed = True
    if not completed or response_id is None or ttft is None:
        raise RuntimeError("the stream did not complete")
    return response_id, ttft


async def conversation(client: httpx.AsyncClient, port: int, row: Row, name: str, turns: int,
                       tokens: int, deadline: float, delay: float) -> None:
    await asyncio.sleep(delay)  # the ramp: conversations start spread out, not in one burst
    previous: str | None = None
    for n in range(turns):
        if time.monotonic() > deadline:
            return
        text = f"Conversation {name}, turn {n}: tell me about topic {uuid.uuid4().hex[:8]}."
        try:
            previous, ttft = await turn(client, port, text, previous, tokens)
        except (httpx.HTTPError, RuntimeError, KeyError, orjson.JSONDecodeError):
            row.errors += 1
            return  # a broken chain cannot go on
        row.turns += 1
        row.ttft_ms.append(ttft)


async def run_row(row: Row, port: int, options: argparse.Namespace) -> None:
    limits = httpx.Limits(max_connections=options.conversations + 4)
    started = time.monotonic()
    deadline = started + options.max_seconds
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(
            conversation(client, port, row, f"{row.policy}-{n}", options.turns, options.tokens,
                         deadline, options.ramp_seconds * n / options.conversations)
            for n in range(options.conversations)))
    row.seconds = time.monotonic() - started


def sim_stats(port: int) -> dict[str, Any]:
    status, body = http_get(port, "/sim/stats")
    if status != 200:
        raise RuntimeError(f"simulator {port}: /sim/stats HTTP {status}")
    result: dict[str, Any] = orjson.loads(body)
    return result


def measure(row: Row, sims: Sequence[int]) -> None:
    stats = [sim_stats(port) for port in sims]
    hits = sum(s["prefix_hit_tokens"] for s in stats)
    total = hits + sum(s["prefix_miss_tokens"] for s in stats)
    row.hit_rate = hits / total if total else 0.0
    row.per_replica = [s["chat_requests"] for s in stats]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = module_parser("bench.fleet", __doc__)
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=24, help="answer tokens per turn")
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.5)
    parser.add_argument("--prefix-cache-blocks", type=int, default=4096)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per row")
    parser.add_argument("--ramp-seconds", type=float, default=2.0,
                        help="conversations start spread over this long")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--no-slow", action="store_true", help="skip the slow-replica rows")
    return parser.parse_args(argv)


class Servers:
    """The child processes of one run, stopped in reverse order."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.services: list[Service] = []

    def start(self, name: str, args: list[str], port: int, path: str | None) -> int:
        """Start a child; it is ready when `path` answers 200 (None: when Redis answers)."""
        service = Service(name, args, self.logs / f"{name}.log", env=self.env)
        ready = (lambda: redis_ok(port)) if path is None else (lambda: http_ok(port, path))
        self.services.append(service.start(ready))
        return port

    def stop(self, names: Sequence[str] | None = None) -> None:
        for service in reversed(list(self.services)):
            if names is None or service.name in names:
                service.stop()
                self.services.remove(service)


def routing_flags(policy: str) -> list[str]:
    """The one flag a row passes beyond addresses: the policy it measures; none for the
    default's (affinity)."""
    return [] if policy == DEFAULT_ROUTING else ["--routing", policy]


def scenario(servers: Servers, name: str, slow: bool, redis_port: int,
             options: argparse.Namespace, out: list[Row]) -> None:
    sims: list[int] = []
    for n in range(3):
        factor = SLOW_FACTOR if slow and n == 2 else 1
        port = free_port()
        sims.append(servers.start(f"sim-{name}-{n}", [
            sys.executable, "-m", "proxy", "simulate", "--host", HOST, "--port", str(port),
            "--token-delay-ms", str(options.token_delay_ms * factor),
            "--prefill-ms-per-token", str(options.prefill_ms_per_token * factor),
            "--prefix-cache-blocks", str(options.prefix_cache_blocks)], port, "/health"))
    upstreams = [arg for port in sims for arg in ("--upstream", f"http://{HOST}:{port}")]
    for policy in options.policies.split(","):
        port = free_port()
        proxy = f"proxy-{name}-{policy}"
        servers.start(proxy, [
            sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
            *upstreams, "--redis-url", f"redis://{HOST}:{redis_port}/0",
            *routing_flags(policy)], port, "/readyz")
        for sim in sims:
            http_get(sim, "/sim/reset", method="POST")
        row = Row(name, policy)
        asyncio.run(run_row(row, port, options))
        measure(row, sims)
        print(row.line(), flush=True)
        out.append(row)
        servers.stop([proxy])
    servers.stop([f"sim-{name}-{n}" for n in range(3)])


def ratios(rows: Sequence[Row]) -> None:
    """Each baseline's TTFT and hit rate against affinity's, per scenario."""
    for name in dict.fromkeys(r.scenario for r in rows):
        mine = {r.policy: r for r in rows if r.scenario == name}
        base = mine.get("affinity")
        if base is None or not base.ttft_ms:
            continue
        for policy, row in mine.items():
            if policy != "affinity" and row.ttft_ms:
                print(f"{name:6s} {policy:12s} vs affinity: TTFT p50 "
                      f"{row.percentile(0.5) / base.percentile(0.5):5.2f}x, p99 "
                      f"{row.percentile(0.99) / base.percentile(0.99):5.2f}x, hit rate "
                      f"{row.hit_rate:.1%} vs {base.hit_rate:.1%}")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    redis_exe = shutil.which("redis-server")
    if redis_exe is None:
        print("redis-server is not installed", file=sys.stderr)
        return 1
    logs = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    servers = Servers(logs, env)
    rows: list[Row] = []
    print(f"bench.fleet: 3 replicas, {options.conversations} conversations x {options.turns} "
          f"turns, shared system prompt, prefill {options.prefill_ms_per_token} ms/token, "
          f"{options.token_delay_ms} ms/token; shared machine: compare within one run; proxy "
          f"flags: --routing per policy, none for {DEFAULT_ROUTING} (the default)")
    try:
        redis_port = free_port()
        servers.start("redis", [redis_exe, "--bind", HOST, "--port", str(redis_port), "--save",
                                "", "--appendonly", "no", "--dir", str(logs)], redis_port, None)
        scenario(servers, "even", False, redis_port, options, rows)
        if not options.no_slow:
            scenario(servers, "slow", True, redis_port, options, rows)
        ratios(rows)
    finally:
        servers.stop()
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if any(r.errors for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
