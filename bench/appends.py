"""`python -m bench.appends`: three ways to write one event-log flush, side by side.

The flush of `services/eventlog/writer.py` at 256 streams x 20 ms/token carries about one event per
stream (tokens are 20 ms apart, the window is 20 ms). Measured here without the proxy, on a
redis-server of its own pinned to core 0 (this process on core 1), for `--streams` streams
with `--events` events each per flush, `--flushes` flushes per round, the methods interleaved
round by round:

    per-stream  one EVALSHA of scripts.APPEND_EVENTS per stream, pipelined (the old way)
    one-call    one EVALSHA of scripts.APPEND_EVENTS_MANY for every stream (what the store does)
    xadd        plain pipelined XADD per event plus EXPIRE per stream, as redis-py sends them
                (no tenant/closed check: the rules the scripts keep would be lost)

Reported per 1,000 events: redis-server CPU (utime+stime from /proc) and this process's CPU
(building and sending the commands, reading the replies). Both count: on one host they share
the machine with the proxy.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis

from bench.options import module_parser
from bench.procs import CLK_TCK
from bench.stack import HOST, redis_beside_proxy
from proxy.store import keys
from proxy.store.base import StoredEvent
from proxy.store.lua import scripts
from proxy.store.lua.packing import packed, stream_args

METHODS = ("per-stream", "one-call", "xadd")
# A text delta as the proxy stores it (~188 bytes: the item id is 52 characters); `--event-bytes`
# pads or cuts its text to weigh what a smaller record format would save.
DELTA = (b'{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_'
         + b"0" * 48 + b'","output_index":0,"content_index":0,"delta":"%s","logprobs":[]}')
DELTA_BYTES = len(DELTA % (100, b" word"))


def _event(seq: int, size: int) -> bytes:
    """An event of about `size` bytes (at least its number and a few characters)."""
    if size >= DELTA_BYTES:
        return DELTA % (seq, b" word" + b"x" * (size - DELTA_BYTES))
    return b'"%s"%d' % (b"x" * max(1, size - 8), seq)


def _batch(streams: int, events: int, seq: int,
           size: int = DELTA_BYTES) -> dict[str, list[StoredEvent]]:
    return {f"resp_bench{n:05d}": [StoredEvent(seq + i, "response.output_text.delta",
                                               _event(seq + i, size)) for i in range(events)]
            for n in range(streams)}


async def _setup(client: Redis, streams: int) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for n in range(streams):
            rid = f"resp_bench{n:05d}"
            pipe.delete(keys.response_log(rid))
            pipe.hset(keys.response(rid), mapping={"tenant": "t", "status": "in_progress",
                                                   "logged": "0", "closed": "0"})
        await pipe.execute()


def _writers(client: Redis, shas: dict[str, str]
             ) -> dict[str, Callable[[dict[str, list[StoredEvent]]], Awaitable[object]]]:
    async def per_stream(batch: dict[str, list[StoredEvent]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for rid, events in batch.items():
                pipe.evalsha(shas["per-stream"], 2, keys.response(rid), keys.response_log(rid),
                             3600, packed(events))
            return await pipe.execute()

    async def one_call(batch: dict[str, list[StoredEvent]]) -> object:
        hashes, args = stream_args(batch)
        return await client.evalsha(shas["one-call"], 1, hashes[0], 3600, *args)

    async def xadd(batch: dict[str, list[StoredEvent]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for rid, events in batch.items():
                log = keys.response_log(rid)
                for e in events:
                    pipe.xadd(log, {"t": e.type, "d": e.data}, id=keys.log_entry_id(e.seq))
                pipe.expire(log, 3600)
            return await pipe.execute()

    return {"per-stream": per_stream, "one-call": one_call, "xadd": xadd}


async def _measure(redis_pid: int, port: int, streams: int, events: int, flushes: int,
                   rounds: int, size: int) -> dict[str, tuple[float, float]]:
    client = Redis(host=HOST, port=port)
    shas = {"per-stream": await client.script_load(scripts.APPEND_EVENTS),
            "one-call": await client.script_load(scripts.APPEND_EVENTS_MANY)}
    writers = _writers(client, shas)
    from bench.procs import cpu_ticks
    totals = {m: [0, 0.0, 0] for m in METHODS}  # redis ticks, own seconds, events
    try:
        for _ in range(rounds):
            for method in METHODS:
                await _setup(client, streams)
                write = writers[method]
                seq = 0
                ticks0, own0 = cpu_ticks(redis_pid), time.process_time()
                for _ in range(flushes):
                    await write(_batch(streams, events, seq, size))
                    seq += events
                totals[method][0] += cpu_ticks(redis_pid) - ticks0
                totals[method][1] += time.process_time() - own0
                totals[method][2] += streams * events * flushes
    finally:
        await client.aclose()
    return {m: (ticks * 1000 / CLK_TCK * 1000 / n, own * 1000 * 1000 / n)
            for m, (ticks, own, n) in totals.items()}


def run(streams: int, events: int, flushes: int, rounds: int,
        size: int = DELTA_BYTES) -> dict[str, tuple[float, float]]:
    with redis_beside_proxy("bench-appends-") as (pid, port):
        return asyncio.run(_measure(pid, port, streams, events, flushes, rounds, size))


def table(results: dict[str, tuple[float, float]]) -> list[str]:
    base = sum(results["per-stream"])
    lines = ["| method | redis-server CPU ms / 1k events | client CPU ms / 1k events | "
             "both | x per-stream |", "|---|---:|---:|---:|---:|"]
    for method, (redis_ms, own_ms) in results.items():
        both = redis_ms + own_ms
        lines.append(f"| {method} | {redis_ms:.1f} | {own_ms:.1f} | {both:.1f} "
                     f"| {both / base:.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.appends", __doc__)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--events", type=int, default=1, help="events per stream per flush")
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--event-bytes", type=int, default=DELTA_BYTES,
                        help=f"bytes of each event's JSON (default {DELTA_BYTES}, a text delta)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = run(args.streams, args.events, args.flushes, args.rounds, args.event_bytes)
    print(f"{args.streams} streams x {args.events} event(s) of {args.event_bytes} bytes per flush, "
          f"{args.flushes} flushes "
          f"x {args.rounds} rounds, interleaved")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
