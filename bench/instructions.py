"""`python -m bench.instructions`: the store's cost per token and a stream's set-up, counted in
instructions, side by side with another commit: figures this VM's neighbours cannot move.

Why: on this 2-core VM a round of `bench.versions` reads ±15 % from the one before it (the same
tree, the same load), so a target within 10 % of a ratio (the performance round's store on ÷
store off ≤ 1.15) cannot be shown or refuted by CPU time in one run. Valgrind's callgrind counts
the instructions a process runs, whatever else the machine does: two runs of the same tree agree
within ~2 %. What it does not see: the kernel (system calls, socket copies: `strace` counts the
same calls store on and off), cache misses and wake-ups. So these figures are the work the code
asks of the CPU, not its time; the CPU-time rows of `bench.versions` stay the product's figures.

How: the proxy and its redis-server each run under callgrind (collection off until the
measured waves), the simulator outside it on the other core. Under callgrind a process runs
~50x slower, so time is stretched by `--scale` (20): the simulator's 20 ms per token becomes
400 ms, and the proxy's own clocks that shape the stored path are stretched alike (the event
log's write window and first window, the held connection's early margin, the lease's length,
the SSE keep-alive pings' interval, uvicorn's keep-alive timeout), so each flush carries the
runs of tokens it carries at full speed. `--streams` (64) streams at
once on keep-alive connections opened before anything is counted, in waves of `--tokens` (16
and 96) tokens each, store off then on; after each wave both
processes' counts are dumped and zeroed. Per token: the difference of the two waves over the
difference of their tokens; per request (set-up, final write, everything but the tokens): the
short wave less its tokens. Each figure has the processes' idle work over the wave's duration
taken out (a quiet span measured first). The set-up to the first delta: `--streams` 2-token
answers a stretched 1.5 s apart, counted from the first write until every stream has its first
delta (`bench.burstsetup`'s measure); `--ttft-ms` makes them wait that long (stretched) for
their first token, as a real prefill does (by default it comes at once).

Needs valgrind (`apt-get install valgrind`); `--baseline REV` (default c9e4875, the performance
round's baseline) is exported from git and run the same way. About 4 minutes a tree.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.options import module_parser
from bench.procs import Service, free_port, plan_pinning
from bench.stack import HOST, http_ok
from bench.systems import SYSTEMS
from bench.versions import ROOT, export, tree_env

STORES = {"off": "responses", "on": "responses-store"}
READ_TIMEOUT = 600.0  # per read of a stream under callgrind: a stuck one fails the run
READY_TIMEOUT = 300.0  # a proxy under callgrind takes ~30-60 s to import and start
# The SSE keep-alive interval (`--ping-interval`'s default), stretched like the other clocks: the
# set-up wave's first token comes 1.5 s x `--scale` after its start, and at the unstretched 15 s
# each stream sent one or two pings inside the span counted as its set-up, which no stream
# waiting 1.5 s for its first token sends.
PING_SECONDS = 15.0

# What each launched process runs last: the proxy's command line, as `python -m proxy` would.
_MAIN = """
import sys
from proxy.cli import main
main(sys.argv[1:])
"""
# Run inside the proxy's process before `serve`: the clocks of the stored path stretched by
# SCALE (see the module's docstring). Written against the names each tree has, so an older
# commit's proxy is stretched alike (an absent name is skipped).
_LAUNCH = """
import inspect, os, sys
scale = float(os.environ["BENCH_TIME_SCALE"])
from proxy.services.eventlog import writer
hub_init = writer.EventLogHub.__init__
signature = inspect.signature(hub_init)
def stretched(self, *args, **kwargs):
    bound = signature.bind(self, *args, **kwargs)
    bound.apply_defaults()
    for name in ("window", "first_window"):
        if bound.arguments.get(name) is not None:
            bound.arguments[name] *= scale
    hub_init(*bound.args, **bound.kwargs)
writer.EventLogHub.__init__ = stretched
try:
    from proxy.store.connection import held
    held._EARLY *= scale
except (ImportError, AttributeError):
    pass
""" + _MAIN
# uvicorn's keep-alive timeout (5 s), stretched in the proxy and in the simulator: a callgrind
# dump of the proxy between two waves can take longer than that on a slow VM, and a server then
# closed the idle connections the next wave was to use (the proxy's clients', or the pooled
# upstream ones of a proxy that does not retry a stale one: c9e4875 answered 502).
_KEEP_ALIVE = """
import os, uvicorn
config_init = uvicorn.Config.__init__
def stretched_config(self, *args, **kwargs):
    config_init(self, *args, **kwargs)
    self.timeout_keep_alive *= float(os.environ["BENCH_TIME_SCALE"])
uvicorn.Config.__init__ = stretched_config
"""
_LAUNCH = _KEEP_ALIVE + _LAUNCH
_SIMULATE = _KEEP_ALIVE + _MAIN


@dataclass(frozen=True)
class Counts:
    proxy: int
    redis: int
    seconds: float

    def less_idle(self, idle: Counts) -> tuple[float, float]:
        """The counts with the processes' idle work over the same span taken out."""
        share = self.seconds / idle.seconds
        return self.proxy - idle.proxy * share, self.redis - idle.redis * share


@dataclass(frozen=True)
class Figures:
    """Instructions of (proxy, Redis), per token and per request, per store setting."""
    per_token: dict[str, tuple[float, float]]
    per_request: dict[str, tuple[float, float]]
    setup: dict[str, tuple[float, float]]

    def ratio(self) -> float:
        """Store on ÷ store off per token, Redis counted."""
        return sum(self.per_token["on"]) / sum(self.per_token["off"])


class Callgrind:
    """A process under callgrind, collection off until `on`; `dump` returns and zeroes its
    count."""

    def __init__(self, pid: int, name: str, out: Path) -> None:
        self.pid, self.name, self.out = pid, name, out

    def on(self) -> None:
        _control(["-i", "on", str(self.pid)])

    def dump(self) -> int:
        before = set(self.out.parent.glob(f"{self.out.name}.*"))
        _control(["-d", str(self.pid)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the dump is written by the process: bounded wait
            for path in set(self.out.parent.glob(f"{self.out.name}.*")) - before:
                total = _totals(path)
                if total is not None:
                    return total
            time.sleep(0.2)
        raise RuntimeError(f"no callgrind dump from {self.name}")


def _control(args: list[str]) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def _totals(path: Path) -> int | None:
    match = re.search(rb"^totals: (\d+)", path.read_bytes(), re.MULTILINE)
    return int(match.group(1)) if match else None


# One keep-alive connection per stream, opened before anything is counted (as
# `bench.burstsetup`'s): a request's figures hold no connection's set-up.
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _stream(connection: Connection, request: bytes,
                  first: asyncio.Event | None = None) -> None:
    """One streamed answer on `connection` (chunked: it ends with the empty chunk)."""
    reader, writer = connection
    writer.write(request)
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = await asyncio.wait_for(reader.read(65536), READ_TIMEOUT)
        if not chunk:
            raise RuntimeError("the proxy closed a stream early")
        data += chunk
        if first is not None and not first.is_set() \
                and data.find(b"response.output_text.delta") >= 0:
            first.set()
    if data.find(b"response.completed") < 0:
        raise RuntimeError(f"a stream did not complete: {data[-300:]!r}")


async def _wave(port: int, connections: list[Connection], system: str, tokens: int,
                delay_ms: float) -> None:
    request = SYSTEMS[system].request(HOST, port, tokens, delay_ms)
    await asyncio.gather(*(_stream(connection, request) for connection in connections))


async def _setup_wave(port: int, connections: list[Connection], system: str, gap_ms: float,
                      measured: list[Callgrind], ttft_ms: float | None = None) -> Counts:
    """Counts from the first write until every stream's first delta; the rest of the wave
    uncounted (dumped apart)."""
    request = SYSTEMS[system].request(HOST, port, 2, gap_ms, ttft_ms)
    started = time.monotonic()
    firsts = [asyncio.Event() for _ in connections]
    tasks = [asyncio.create_task(_stream(connection, request, first))
             for connection, first in zip(connections, firsts, strict=True)]
    await asyncio.wait_for(asyncio.gather(*(first.wait() for first in firsts)), READ_TIMEOUT)
    proxy, redis = (process.dump() for process in measured)
    counts = Counts(proxy, redis, time.monotonic() - started)
    await asyncio.gather(*tasks)
    for process in measured:
        process.dump()
    return counts


def measure(tree: Path, label: str, scale: float, streams: int, tokens: tuple[int, int],
            log_dir: Path, ttft_ms: float | None = None) -> Figures:
    """`tree`'s proxy (and its redis-server) under callgrind: see the module's docstring."""
    short, long = tokens
    pinning = plan_pinning()
    redis_port, sim_port, port = free_port(), free_port(), free_port()
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    redis = Service(f"redis-{label}", [
        *valgrind, f"--callgrind-out-file={log_dir}/redis-{label}.cg", "redis-server",
        "--port", str(redis_port), "--bind", HOST, "--save", "", "--appendonly", "no"],
        log_dir / f"redis-{label}.log", pinning.proxy)
    sim = Service(f"sim-{label}", [sys.executable, "-c", _SIMULATE, "simulate", "--port",
                                   str(sim_port), "--host", HOST],
                  log_dir / f"sim-{label}.log", pinning.load,
                  {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_TIME_SCALE": f"{scale:g}"},
                  cwd=ROOT)
    env = {**tree_env(tree, os.environ), "BENCH_TIME_SCALE": f"{scale:g}"}
    proxy = Service(f"proxy-{label}", [
        *valgrind, f"--callgrind-out-file={log_dir}/proxy-{label}.cg", sys.executable, "-c",
        _LAUNCH, "serve", "--upstream", f"http://{HOST}:{sim_port}", "--redis-url",
        f"redis://{HOST}:{redis_port}", "--port", str(port), "--host", HOST,
        "--lease-ttl", f"{10 * scale:g}", "--ping-interval", f"{PING_SECONDS * scale:g}"],
        log_dir / f"proxy-{label}.log", pinning.proxy,
        env, cwd=tree)
    services = [redis, sim, proxy]
    try:
        redis.start(lambda: _redis_up(redis_port), READY_TIMEOUT)
        sim.start(lambda: http_ok(sim_port, "/v1/models"))
        proxy.start(lambda: http_ok(port, "/healthz") and http_ok(port, "/readyz"),
                    READY_TIMEOUT)
        measured = [Callgrind(proxy.pid, proxy.name, log_dir / f"proxy-{label}.cg"),
                    Callgrind(redis.pid, redis.name, log_dir / f"redis-{label}.cg")]
        return asyncio.run(_measure(port, measured, scale, streams, short, long,
                                    None if ttft_ms is None else ttft_ms * scale))
    finally:
        for service in reversed(services):
            service.stop()


def _redis_up(port: int) -> bool:
    done = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), "ping"],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() == "PONG"


async def _measure(port: int, measured: list[Callgrind], scale: float, streams: int,
                   short: int, long: int, ttft_ms: float | None = None) -> Figures:
    """`ttft_ms`: the set-up wave's first-token wait, stretched already (None: at once)."""
    for process in measured:
        process.on()

    async def counted(coro: Coroutine[Any, Any, None]) -> Counts:
        started = time.monotonic()
        await coro
        proxy, redis = (process.dump() for process in measured)
        return Counts(proxy, redis, time.monotonic() - started)

    # The quiet span first, with no connection open: an idle keep-alive connection is closed
    # by the server after a few seconds, and the span is longer.
    idle = await counted(asyncio.sleep(2 * scale))
    connections = [await asyncio.open_connection(HOST, port) for _ in range(streams)]
    try:
        delay = 20.0 * scale
        for system in STORES.values():  # warm-up: imports, caches, connections (dropped)
            await counted(_wave(port, connections, system, 2, delay))
        per_token: dict[str, tuple[float, float]] = {}
        per_request: dict[str, tuple[float, float]] = {}
        setup: dict[str, tuple[float, float]] = {}
        for store, system in STORES.items():
            (proxy_short, redis_short), (proxy_long, redis_long) = [
                (await counted(_wave(port, connections, system, tokens, delay))).less_idle(idle)
                for tokens in (short, long)]
            tokens_more = streams * (long - short)
            token = ((proxy_long - proxy_short) / tokens_more,
                     (redis_long - redis_short) / tokens_more)
            per_token[store] = token
            per_request[store] = (proxy_short / streams - short * token[0],
                                  redis_short / streams - short * token[1])
            first = (await _setup_wave(port, connections, system, 1500 * scale, measured,
                                       ttft_ms)
                     ).less_idle(idle)
            setup[store] = (first[0] / streams, first[1] / streams)
        return Figures(per_token, per_request, setup)
    finally:
        for _reader, writer in connections:
            writer.close()


def table(results: dict[str, Figures]) -> list[str]:
    lines = ["| tree | per token, store off (proxy + Redis) | per token, store on | on ÷ off "
             "| per request, off | per request, on | set-up to first delta, off | on |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def pair(value: tuple[float, float]) -> str:
        return f"{value[0] / 1000:,.1f}k + {value[1] / 1000:,.1f}k"

    for label, figures in results.items():
        lines.append(
            f"| {label} | {pair(figures.per_token['off'])} | {pair(figures.per_token['on'])} "
            f"| {figures.ratio():.3f} | {pair(figures.per_request['off'])} "
            f"| {pair(figures.per_request['on'])} | {pair(figures.setup['off'])} "
            f"| {pair(figures.setup['on'])} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.instructions", __doc__)
    parser.add_argument("--baseline", default="c9e4875",
                        help="the commit to compare with ('' for none; default c9e4875)")
    parser.add_argument("--scale", type=float, default=20.0,
                        help="how much time is stretched under callgrind (default 20)")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, nargs=2, default=[16, 96],
                        metavar=("SHORT", "LONG"))
    parser.add_argument("--ttft-ms", type=float, default=None,
                        help="the set-up wave's first token after this wait (default: at once; "
                             "a real prefill takes tens to hundreds of ms)")
    args = parser.parse_args(argv)
    if not 0 < args.tokens[0] < args.tokens[1]:
        parser.error("--tokens: SHORT must be below LONG, both above 0")
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("bench.instructions needs valgrind (apt-get install valgrind)")
        return 2
    log_dir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    trees = {"current": ROOT}
    baseline_dir: Path | None = None
    if args.baseline:
        baseline_dir = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
        trees[export(args.baseline, baseline_dir)] = baseline_dir
    results: dict[str, Figures] = {}
    try:
        for label, tree in trees.items():
            results[label] = figures = measure(tree, label, args.scale, args.streams,
                                               tuple(args.tokens), log_dir, args.ttft_ms)
            print(f"{label}: per token off {sum(figures.per_token['off']):,.0f}, on "
                  f"{sum(figures.per_token['on']):,.0f} (ratio {figures.ratio():.3f})",
                  flush=True)
    finally:
        if baseline_dir is not None:
            shutil.rmtree(baseline_dir, ignore_errors=True)
    print(f"\ninstructions (callgrind), {args.streams} streams, waves of {args.tokens[0]} and "
          f"{args.tokens[1]} tokens, time x{args.scale:g}; logs and dumps in {log_dir}")
    for line in table(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
