"""`python -m bench.clients`: our upstream HTTP client against aiohttp's, side by side, in one run
(whether to keep our own client: the per-token cost of each).

Two proxies run at once against the same simulator and redis-server, both pinned to the proxy
core (one is idle while the other is measured): `python -m proxy serve` (our `http1.py` client)
and `python -m bench.aiohttp_upstream serve` (the same proxy with aiohttp's client behind the
same facade). Rows are interleaved, ours then aiohttp's, for each system, `--rounds` times, so
a slow drift of the shared machine hits both alike; each row is the matrix's own row
(`matrix.Bench.run_one`: the same load generator, checks, CPU and TTFT figures). The result is
printed as a table of medians over the rounds; put it in docs/BENCHMARKS.md by hand.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.matrix import Bench
from bench.options import ROOT, module_parser, parse_options
from bench.procs import Service, free_port, pin_self, plan_pinning
from bench.run import _loop_factory
from bench.stack import HOST, Stack, StackOptions, http_ok
from bench.stats import Row, median_of
from bench.systems import SYSTEMS

CLIENTS = ("http1", "aiohttp")


def _alternative(stack: Stack, log_dir: Path) -> tuple[Service, int]:
    port = free_port()
    args = list(stack.proxy.args)
    args[args.index("-m") + 1] = "bench.aiohttp_upstream"
    args[args.index("--port") + 1] = str(port)
    service = Service("proxy-aiohttp", args, log_dir / "proxy-aiohttp.log",
                      stack.options.pinning.proxy, stack.proxy.env)
    service.start(lambda: http_ok(port, "/healthz") and http_ok(port, "/readyz"))
    return service, port


def run(systems: Sequence[str], concurrency: int, delay: float, rounds: int,
        seconds: float) -> dict[tuple[str, str], list[Row]]:
    options = parse_options(["--systems", ",".join(systems), "--concurrency",
                             str(concurrency), "--delays", f"{delay:g}", "--seconds",
                             f"{seconds:g}", "--retries", "0", "--no-docs"])
    pinning = plan_pinning()
    affinity = os.sched_getaffinity(0)
    pin_self(pinning.load)
    log_dir = options.results_dir / f"clients-{time.strftime('%Y%m%dT%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], list[Row]] = {}
    stack = Stack(StackOptions(log_dir=log_dir, pinning=pinning))  # no background rows
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner, stack:
            alt, alt_port = _alternative(stack, log_dir)
            ours, our_port = stack.proxy, stack.proxy_port
            try:
                bench = Bench(options, stack, runner, print)
                bench.warm_up()
                stack.proxy, stack.proxy_port = alt, alt_port
                bench.warm_up()
                for index in range(rounds):
                    for name in systems:
                        for client, (service, port) in zip(
                                CLIENTS, ((ours, our_port), (alt, alt_port)), strict=True):
                            stack.proxy, stack.proxy_port = service, port
                            row, _ = bench.run_one(SYSTEMS[name], concurrency, delay)
                            results.setdefault((name, client), []).append(row)
                            print(f"round {index + 1} {name:<12} {client:<8} "
                                  f"cpu {row.proxy_cpu_ms_per_1k or 0:7.1f} ms/1k tok  "
                                  f"ttft p50 {row.ttft_ms['p50'] or 0:8.1f} ms  "
                                  f"tok/s {row.tps:8.0f}  errors {row.errors}")
            finally:
                stack.proxy, stack.proxy_port = ours, our_port
                alt.stop()
    finally:
        os.sched_setaffinity(0, affinity)
    return results


def table(results: dict[tuple[str, str], list[Row]]) -> list[str]:
    lines = ["| system | client | proxy CPU ms / 1k tok | TTFT p50 ms | TTFT p99 ms | tok/s "
             "| errors | vs http1 (CPU, TTFT p50) |",
             "|---|---|---:|---:|---:|---:|---:|---|"]

    med = median_of
    for (name, client), rows in results.items():
        base = results[(name, "http1")]
        versus = "" if client == "http1" else (
            f"{med(rows, 'cpu') / med(base, 'cpu'):.2f}x, "
            f"{med(rows, 'ttft') / max(med(base, 'ttft'), 1e-9):.2f}x")
        lines.append(f"| {name} | {client} | {med(rows, 'cpu'):.1f} | {med(rows, 'ttft'):.1f} "
                     f"| {med(rows, 'ttft99'):.1f} | {med(rows, 'tps'):.0f} "
                     f"| {sum(r.errors for r in rows)} | {versus} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.clients", __doc__)
    parser.add_argument("--systems", default="passthrough,responses")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = run(args.systems.split(","), args.concurrency, args.delay, args.rounds,
                  args.seconds)
    print()
    for line in table(results):
        print(line)
    print(f"(host {HOST}; {ROOT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
