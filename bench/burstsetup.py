"""`python -m bench.burstsetup`: what a burst's set-up costs, apart from its tokens.

The burst table of `bench.scenarios` measures two waves of a closed loop of 20 ms-per-token
streams; its TTFT p50 moves by 20-30 ms from run to run on this 2-core machine (the first wave is
a true burst, the second is spread by the first's set-up, and relayed tokens compete with set-ups
on the core). Here only set-ups are measured: `--streams` keep-alive connections (256), every
request written in the same instant, each answer 2 tokens with `--gap-ms` (1,500) between them,
so the proxy's CPU from the first write to the last stream's first delta is the burst's set-up
and nothing else; `--bursts` (5) bursts per system, the first taken as warm-up, medians of the
others. The proxy (default flags) and its redis-server share one core, the simulator and this
client the other.

Systems: `healthz` (`GET /healthz`: uvicorn's parse, the middleware, the access log, a JSON
answer: the floor of any request here), `passthrough` (a chat stream relayed), `responses`
(store off) and `responses-store` (store on). Reported per system: proxy CPU per request to the
first delta (µs; for `healthz` per answer), its redis-server's CPU over the same span (µs per
request: Redis shares the proxy's core, so its work delays the first tokens too), first-delta
time p50 and p99 of the burst (ms), the direct simulator's for reference, and `128 x (proxy +
Redis) CPU`: the CPU before the median stream's first token if set-ups ran strictly one after
the other — the least a one-process proxy can give the median of a 256-burst.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.options import module_parser
from bench.procs import CLK_TCK, Service, cpu_ticks, free_port, plan_pinning
from bench.stack import HOST, http_ok, redis_beside_proxy
from bench.systems import SYSTEMS

KINDS = ("direct", "healthz", "passthrough", "responses", "responses-store")
READ_TIMEOUT = 30.0  # per read of one answer: a stuck stream fails the run, never hangs it
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"
CHAT_CONTENT = re.compile(rb'"content":"[^"]')  # a chunk with text (the first has none)


@dataclass(frozen=True)
class Burst:
    cpu_us: float  # proxy CPU per request, first write to the last first delta
    redis_us: float  # the same for its redis-server (on the proxy's core)
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Result:
    kind: str
    bursts: tuple[Burst, ...]

    def median(self, pick: str) -> float:
        return float(statistics.median(getattr(b, pick) for b in self.bursts))


def cpu_seconds(pid: int) -> float:
    """A process's CPU time to the nanosecond: Linux's per-process CPU clock
    (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)). /proc's ticks are 10 ms, a third of a
    256-request burst of `/healthz`; schedstat is off on this kernel."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return cpu_ticks(pid) / CLK_TCK


def _first_content(kind: str, data: bytes) -> bool:
    if kind == "healthz":
        return b"\r\n\r\n" in data
    if kind in ("direct", "passthrough"):
        return CHAT_CONTENT.search(data) is not None
    return b"response.output_text.delta" in data


def _ended(kind: str, data: bytes) -> bool:
    if kind == "healthz":
        _, sep, body = data.partition(b"\r\n\r\n")
        return bool(sep) and b"}" in body
    return data.endswith(b"0\r\n\r\n")


async def _one(kind: str, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
               request: bytes, sent: float, firsts: list[float], streams: int,
               all_first: asyncio.Event) -> None:
    """One answer read whole; the time from `sent` to its first content goes to `firsts`
    (`all_first` set once `streams` of them are in)."""
    reader, writer = conn
    writer.write(request)
    data = b""
    first: float | None = None
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), READ_TIMEOUT)
        if not chunk:
            raise RuntimeError(f"{kind}: connection closed mid-answer")
        data += chunk
        if first is None and _first_content(kind, data):
            first = time.perf_counter()
            firsts.append(first - sent)
            if len(firsts) == streams:
                all_first.set()
        if _ended(kind, data):
            return


async def _bursts(kind: str, port: int, pid: int | None, redis_pid: int, streams: int,
                  bursts: int, gap_ms: float) -> Result:
    request = HEALTHZ if kind == "healthz" else SYSTEMS[kind].request(HOST, port, 2, gap_ms)
    conns = [await asyncio.open_connection(HOST, port) for _ in range(streams)]
    measured: list[Burst] = []
    try:
        for n in range(bursts):
            firsts: list[float] = []
            all_first = asyncio.Event()
            cpu0 = cpu_seconds(pid) if pid is not None else 0.0
            redis0 = cpu_seconds(redis_pid)
            sent = time.perf_counter()
            tasks = [asyncio.ensure_future(_one(kind, c, request, sent, firsts, streams,
                                                all_first)) for c in conns]
            # The CPU is read once the last first delta is in, before any 2nd token (gap_ms on);
            # a failed answer ends the wait too (and fails the run at the gather).
            waiter = asyncio.ensure_future(all_first.wait())
            pending: set[asyncio.Future[Any]] = {waiter, *tasks}
            while not waiter.done():
                done, pending = await asyncio.wait(pending, timeout=READ_TIMEOUT,
                                                   return_when=asyncio.FIRST_COMPLETED)
                if not done or any(t is not waiter and t.exception() for t in done):
                    break
            cpu1 = cpu_seconds(pid) if pid is not None else 0.0
            redis1 = cpu_seconds(redis_pid)
            waiter.cancel()
            await asyncio.gather(*tasks)
            firsts.sort()
            if n > 0:  # the first burst warms the pools up
                measured.append(Burst((cpu1 - cpu0) * 1e6 / streams,
                                      (redis1 - redis0) * 1e6 / streams,
                                      firsts[len(firsts) // 2] * 1000,
                                      firsts[int(len(firsts) * 0.99)] * 1000))
            await asyncio.sleep(0.3)
    finally:
        for _, writer in conns:
            writer.close()
        await asyncio.gather(*(writer.wait_closed() for _, writer in conns),
                             return_exceptions=True)
    return Result(kind, tuple(measured))


def run(streams: int, bursts: int, gap_ms: float, kinds: Sequence[str]) -> list[Result]:
    pinning = plan_pinning()
    logs = Path(tempfile.mkdtemp(prefix="bench-burstsetup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    sim_port, proxy_port = free_port(), free_port()
    results: list[Result] = []
    # Redis on the proxy's core (as the target asks), this client on the load core.
    with redis_beside_proxy("bench-burstsetup-redis-") as (redis_pid, redis_port):
        sim = Service("simulator", [sys.executable, "-m", "proxy", "simulate", "--host", HOST,
                                    "--port", str(sim_port)], logs / "simulator.log",
                      pinning.load, env)
        proxy = Service("proxy", [sys.executable, "-m", "proxy", "serve", "--host", HOST,
                                  "--port", str(proxy_port), "--upstream",
                                  f"http://{HOST}:{sim_port}", "--redis-url",
                                  f"redis://{HOST}:{redis_port}/0"],
                        logs / "proxy.log", pinning.proxy, env)
        try:
            sim.start(lambda: http_ok(sim_port, "/health"))
            proxy.start(lambda: http_ok(proxy_port, "/readyz"))
            for kind in kinds:
                port, pid = (sim_port, None) if kind == "direct" else (proxy_port, proxy.pid)
                results.append(asyncio.run(_bursts(kind, port, pid, redis_pid, streams, bursts,
                                                   gap_ms)))
        finally:
            for service in (proxy, sim):
                service.stop()
            shutil.rmtree(logs, ignore_errors=True)
    return results


def table(results: Sequence[Result], streams: int) -> list[str]:
    half = streams // 2
    lines = [f"| system | proxy CPU µs / request to first delta | Redis CPU µs | first delta "
             f"p50 ms | p99 ms | {half} x (proxy + Redis) CPU ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        cpu, redis = r.median("cpu_us"), r.median("redis_us")
        direct = r.kind == "direct"
        lines.append(f"| {r.kind} | {'-' if direct else f'{cpu:.0f}'} "
                     f"| {'-' if direct else f'{redis:.0f}'} "
                     f"| {r.median('p50_ms'):.1f} | {r.median('p99_ms'):.1f} "
                     f"| {'-' if direct else f'{half * (cpu + redis) / 1000:.1f}'} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.burstsetup", __doc__)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--bursts", type=int, default=6, help="per system; the first warms up")
    parser.add_argument("--gap-ms", type=float, default=1500.0,
                        help="between an answer's two tokens: set-ups end before any 2nd token")
    parser.add_argument("--systems", default=",".join(KINDS))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    kinds = [k for k in args.systems.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or args.bursts < 2 or args.streams < 2:
        parser.error(f"systems from {','.join(KINDS)} (unknown: {unknown}); --bursts >= 2; "
                     "--streams >= 2")
    results = run(args.streams, args.bursts, args.gap_ms, kinds)
    print(f"{args.streams} requests written at once, {args.bursts - 1} measured bursts per "
          f"system (medians), 2-token answers {args.gap_ms:g} ms apart; proxy and redis-server "
          "on one core, default flags")
    print("\n".join(table(results, args.streams)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
