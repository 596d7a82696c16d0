"""`python -m bench.servers`: the same proxy app under different ASGI servers, side by side, in one
run (the per-send cost: what the ASGI server takes per streamed event).

One proxy process per server (`bench/serverlaunch.py`; "uvicorn" is `python -m proxy serve`
itself), all started at once against one simulator and one redis-server, all pinned to the
proxy core (only the one being measured has traffic). Rows are the matrix's own
(`matrix.Bench.run_one`: the same load generator, stream checks, CPU and TTFT figures),
interleaved server by server within each load, `--rounds` times, the order rotated each round
(`rotated`), so a drift of the shared machine and a row's position fall on every server alike.
Loads (`--loads`):

    long    responses (store off), 256 streams x 256 tokens x 20 ms/token
    store   responses-store, the same
    short   responses, 32 streams x 16-token answers at 0 ms/token (per-request cost)

The table gives medians over the rounds: proxy CPU per 1k tokens (and per request), TTFT p50 /
p99, tok/s, errors, and CPU against uvicorn's. Servers other than uvicorn need granian and
rloop (the `bench` extra; not dependencies of the proxy); one that cannot start is reported and
skipped. Results: docs/BENCHMARKS.md, "the per-send cost".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.matrix import Bench
from bench.options import module_parser, parse_options
from bench.procs import Service, free_port, pin_self, plan_pinning
from bench.run import _loop_factory
from bench.serverlaunch import SERVERS
from bench.stack import Stack, StackOptions, http_ok
from bench.stats import Row, median_of
from bench.systems import SYSTEMS

DEFAULT_SERVERS = ("uvicorn", "uvicorn-h11", "uvicorn-asyncio", "granian", "granian-rloop")


@dataclass(frozen=True)
class Load:
    name: str
    system: str
    concurrency: int
    tokens: int
    delay_ms: float


LOADS = {
    "long": Load("long", "responses", 256, 256, 20.0),
    "store": Load("store", "responses-store", 256, 256, 20.0),
    "short": Load("short", "responses", 32, 16, 0.0),
    "short-store": Load("short-store", "responses-store", 32, 16, 0.0),
    # The store's per-token cost where the core is ~60% busy: store on against off, Redis counted
    "long-128": Load("long-128", "responses", 128, 256, 20.0),
    "store-128": Load("store-128", "responses-store", 128, 256, 20.0),
}
DEFAULT_LOADS = ("long", "store", "short")

# Starts one named proxy beside the stack's own: (the stack, its name, the log folder) ->
# the running service and its port.
Starter = Callable[[Stack, str, Path], tuple[Service, int]]


def _start(stack: Stack, name: str, log_dir: Path) -> tuple[Service, int]:
    """`name`'s proxy beside the stack's own (same flags, its own port)."""
    port = free_port()
    args = list(stack.proxy.args)
    index = args.index("-m")
    args[index + 1:index + 2] = ["bench.serverlaunch", name]
    args[args.index("--port") + 1] = str(port)
    service = Service(f"proxy-{name}", args, log_dir / f"proxy-{name}.log",
                      stack.options.pinning.proxy, stack.proxy.env)
    service.start(lambda: http_ok(port, "/healthz") and http_ok(port, "/readyz"))
    return service, port


def _options(load: Load, seconds: float) -> list[str]:
    return ["--systems", load.system, "--concurrency", str(load.concurrency), "--delays",
            f"{load.delay_ms:g}", "--tokens", str(load.tokens), "--seconds", f"{seconds:g}",
            "--retries", "0", "--no-docs", "--warmup-seconds", "1"]


def table(results: dict[tuple[str, str], list[Row]], ours: str = "uvicorn",
          column: str = "server") -> list[str]:
    lines = [f"| load | {column} | proxy CPU ms / 1k tok | CPU µs / request | TTFT p50 ms "
             f"| TTFT p99 ms | tok/s | errors | CPU vs {ours} | Redis ms / 1k tok |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (load, server), rows in results.items():
        cpu = median_of(rows, "cpu")
        base = results.get((load, ours))
        versus = (f"{cpu / median_of(base, 'cpu'):.2f}x"
                  if base and server != ours and median_of(base, "cpu") else "")
        per_request = cpu * LOADS[load].tokens  # ms per 1k tokens x tokens = µs per request
        lines.append(f"| {load} | {server} | {cpu:.1f} | {per_request:.0f} "
                     f"| {median_of(rows, 'ttft'):.1f} | {median_of(rows, 'ttft99'):.1f} "
                     f"| {median_of(rows, 'tps'):.0f} | {sum(r.errors for r in rows)} "
                     f"| {versus} | {median_of(rows, 'redis'):.1f} |")
    return lines


def run(servers: Sequence[str], loads: Sequence[Load], rounds: int, seconds: float,
        ours: str = "uvicorn", start: Starter = _start,
        label: str = "servers") -> dict[tuple[str, str], list[Row]]:
    """Each of `servers` measured on each load, `rounds` times, rotated; `ours` is the stack's
    own proxy, every other name is started by `start`."""
    pinning = plan_pinning()
    affinity = os.sched_getaffinity(0)
    pin_self(pinning.load)
    options = parse_options(_options(loads[0], seconds))
    log_dir = options.results_dir / f"{label}-{time.strftime('%Y%m%dT%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], list[Row]] = {}
    # No background rows: every proxy on its default flags (docs/BENCHMARKS.md).
    stack = Stack(StackOptions(log_dir=log_dir, pinning=pinning))
    started: list[Service] = []
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner, stack:
            own = (stack.proxy, stack.proxy_port)
            proxies: dict[str, tuple[Service, int]] = {}
            for name in servers:
                if name == ours:
                    proxies[name] = own
                    continue
                try:
                    proxies[name] = start(stack, name, log_dir)
                except Exception as exc:  # a server not installed: say so, measure the rest
                    print(f"{name}: not started ({exc}); see {log_dir}/proxy-{name}.log")
                    continue
                started.append(proxies[name][0])
            bench = Bench(options, stack, runner, print)
            try:
                for service, port in proxies.values():
                    stack.proxy, stack.proxy_port = service, port
                    bench.options = parse_options([*_options(loads[0], seconds), "--systems",
                                                   "responses,responses-store"])
                    bench.warm_up()
                for index in range(rounds):
                    for load in loads:
                        bench.options = parse_options(_options(load, seconds))
                        for name in rotated(list(proxies), index):
                            service, port = proxies[name]
                            stack.proxy, stack.proxy_port = service, port
                            row, _ = bench.run_one(SYSTEMS[load.system], load.concurrency,
                                                   load.delay_ms)
                            results.setdefault((load.name, name), []).append(row)
                            print(f"round {index + 1} {load.name:<11} {name:<16} "
                                  f"cpu {row.proxy_cpu_ms_per_1k or 0:7.1f} ms/1k tok  "
                                  f"ttft p50 {row.ttft_ms['p50'] or 0:8.1f} ms  "
                                  f"p99 {row.ttft_ms['p99'] or 0:8.1f} ms  "
                                  f"tok/s {row.tps:8.0f}  errors {row.errors}"
                                  f"{'  ' + str(row.error_kinds) if row.errors else ''}")
            finally:
                stack.proxy, stack.proxy_port = own
    finally:
        for service in started:
            service.stop()
        os.sched_setaffinity(0, affinity)
    return results


def rotated(names: list[str], index: int) -> list[str]:
    """`names` starting at `index` (mod their number): each server takes each place in a
    block in turn, so a row's position (the first after another load, say) favours none."""
    start = index % len(names) if names else 0
    return names[start:] + names[:start]


def _names(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [part for part in text.split(",") if part]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {','.join(unknown) or '(none)'}; "
                                         f"use {','.join(known)}")
    return names


def round_arguments(parser: argparse.ArgumentParser, loads: Sequence[str], *,
                    rounds: int) -> None:
    """`--loads`, `--rounds`, `--seconds`: what every side-by-side bench (this one,
    versions.py) takes."""
    parser.add_argument("--loads", type=lambda t: _names(t, tuple(LOADS), "load"),
                        default=list(loads), help=f"from {','.join(LOADS)}")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="minimum measured window per row (default 5)")


def parse_rounds(parser: argparse.ArgumentParser,
                 argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1 or args.seconds < 0:
        parser.error("--rounds must be >= 1 and --seconds >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.servers", __doc__)
    parser.add_argument("--servers", type=lambda t: _names(t, SERVERS, "server"),
                        default=list(DEFAULT_SERVERS), help=f"from {','.join(SERVERS)}")
    round_arguments(parser, DEFAULT_LOADS, rounds=2)
    args = parse_rounds(parser, argv)
    results = run(args.servers, [LOADS[name] for name in args.loads], args.rounds,
                  args.seconds)
    print()
    for line in table(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
