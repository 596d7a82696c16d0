"""`python -m bench.scriptcalls`: what one script call costs the proxy's Python, sent alone or
coalesced with the calls of the same loop turn (store/connection/coalesce.py).

A response's create and its final write are one EVALSHA each. Sent alone, redis-py takes a
connection from the blocking pool under a timeout, wraps the call in its retry helper and parses
the reply by itself; coalesced, the calls made in one loop turn go as one pipeline. Measured
here without the proxy, on a redis-server of its own pinned to the proxy core (this process on
the other), `--calls` calls per round made `concurrency` at a time (1: one request alone; 16,
256: a burst), the two ways interleaved round by round. The script writes a record and its
input (`--bytes` of JSON) and returns three numbers, as the create script does.

Reported per call: this process's CPU (building, sending, reading) and redis-server's.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

from bench.options import module_parser
from bench.procs import CLK_TCK, cpu_ticks
from bench.stack import HOST, redis_beside_proxy
from proxy.store.connection.coalesce import ScriptCoalescer

SCRIPT = """
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'object', ARGV[2])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[1], 3600)
redis.call('EXPIRE', KEYS[2], 3600)
return {1, 0, string.len(ARGV[2])}
"""
WAYS = ("alone", "coalesced")
CONCURRENCY = (1, 16, 256)


async def _measure(redis_pid: int, port: int, calls: int, rounds: int,
                   size: int) -> dict[tuple[str, int], tuple[float, float]]:
    # The proxy's own pool kind (store/connection/factory.py): blocking, bounded.
    client = Redis(connection_pool=BlockingConnectionPool(host=HOST, port=port,
                                                          max_connections=64, timeout=5))
    script = client.register_script(SCRIPT)
    coalescer = ScriptCoalescer(client)
    blob = b'{"input":"' + b"x" * size + b'"}'
    totals = {(way, c): [0, 0.0, 0] for way in WAYS for c in CONCURRENCY}
    try:
        await script(keys=["warm:a", "warm:b"], args=["in_progress", blob])
        for _ in range(rounds):
            for concurrency in CONCURRENCY:
                for way in WAYS:
                    def call(i: int, way: str = way) -> Awaitable[Any]:
                        keys_: list[Any] = [f"r:{i}", f"i:{i}"]
                        args: list[Any] = ["in_progress", blob]
                        return script(keys=keys_, args=args) if way == "alone" \
                            else coalescer(script, keys_, args)
                    ticks0, own0 = cpu_ticks(redis_pid), time.process_time()
                    for start in range(0, calls, concurrency):
                        await asyncio.gather(*(call(i) for i in range(start, start + concurrency)))
                    cell = totals[(way, concurrency)]
                    cell[0] += cpu_ticks(redis_pid) - ticks0
                    cell[1] += time.process_time() - own0
                    cell[2] += calls
    finally:
        await client.aclose(close_connection_pool=True)
    return {cell: (ticks * 1e6 / CLK_TCK / n, own * 1e6 / n)
            for cell, (ticks, own, n) in totals.items()}


def run(calls: int, rounds: int, size: int) -> dict[tuple[str, int], tuple[float, float]]:
    with redis_beside_proxy("bench-scriptcalls-") as (pid, port):
        return asyncio.run(_measure(pid, port, calls, rounds, size))


def table(results: dict[tuple[str, int], tuple[float, float]]) -> list[str]:
    lines = ["| calls at once | way | proxy-side CPU µs / call | redis-server CPU µs / call "
             "| proxy-side x alone |", "|---:|---|---:|---:|---:|"]
    for concurrency in CONCURRENCY:
        alone = results[("alone", concurrency)][1]
        for way in WAYS:
            redis_us, own_us = results[(way, concurrency)]
            lines.append(f"| {concurrency} | {way} | {own_us:.1f} | {redis_us:.1f} "
                         f"| {own_us / alone:.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.scriptcalls", __doc__)
    parser.add_argument("--calls", type=int, default=4096, help="calls per way per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=1000, help="the input's size per call")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = run(args.calls, args.rounds, args.bytes)
    print(f"{args.calls} calls x {args.rounds} rounds per cell, {args.bytes} bytes of input "
          "each, ways interleaved")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
