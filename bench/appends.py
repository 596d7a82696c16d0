"""`python -m bench.appends`: ways to write one event-log flush, side by side.

The flush of `services/eventlog/writer.py` carries each live stream's events since its last
one: about one event at 256 streams x 20 ms/token when every window writes, ~43 text deltas
(one log entry's bytes) when a stream nobody else follows is held (writer.py `HOLD_WINDOWS`:
`--events 43`). Measured here
without the proxy, on a redis-server of its own pinned to core 0 (this process on core 1), for
`--streams` streams with `--events` events each per flush, `--flushes` flushes per round, the
methods interleaved round by round:

    per-stream  one EVALSHA of scripts.APPEND_EVENTS per stream, pipelined (the old way)
    one-call    one EVALSHA of scripts.APPEND_EVENTS_MANY for every stream, entries in full
                (`--event-log-format full`)
    compact     the same with runs of deltas compact (what the store does by default)
    xadd        plain pipelined XADD per event plus EXPIRE per stream, as redis-py sends them
                (no tenant/closed check: the rules the scripts keep would be lost)
    append      a log the store does not have: per stream, its events' SSE frames APPENDed to
                one string and their sizes (an index of fixed width) to another, both given
                their TTL (no checks either): what a byte log would cost Redis

Reported per 1,000 events: redis-server CPU (utime+stime from /proc) and this process's CPU
(building and sending the commands, reading the replies). Both count: on one host they share
the machine with the proxy. `--count`: instead, redis-server's instructions per event under
callgrind (`valgrind`), one round: what this VM's neighbours cannot move (its timer's idle work
over the run's time is in them, a few dozen an event).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from redis.asyncio import Redis

from bench.instructions import Callgrind
from bench.options import module_parser
from bench.procs import CLK_TCK
from bench.stack import HOST, redis_beside_proxy
from proxy.core.events.sse import frames
from proxy.store import keys
from proxy.store.base import StoredEvent
from proxy.store.lua import scripts
from proxy.store.lua.packing import packed, stream_args

METHODS = ("per-stream", "one-call", "compact", "xadd", "append")
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
            # the hash too: the flush script keeps the log's last number in it (`last`), and
            # a method after another would find every event written already
            log = keys.response_log(rid)
            pipe.delete(keys.response(rid), log, log + ":bytes", log + ":sizes")
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
        hashes, args = stream_args(batch, compact=False)
        return await client.evalsha(shas["one-call"], 1, hashes[0], 3600, *args)

    async def compact(batch: dict[str, list[StoredEvent]]) -> object:
        hashes, args = stream_args(batch, compact=True)
        return await client.evalsha(shas["one-call"], 1, hashes[0], 3600, *args)

    async def xadd(batch: dict[str, list[StoredEvent]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for rid, events in batch.items():
                log = keys.response_log(rid)
                for e in events:
                    pipe.xadd(log, {"t": e.type, "d": e.data}, id=keys.log_entry_id(e.seq))
                pipe.expire(log, 3600)
            return await pipe.execute()

    async def append(batch: dict[str, list[StoredEvent]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for rid, events in batch.items():
                log = keys.response_log(rid)
                framed = [frames([(e.type, e.data)]) for e in events]
                pipe.append(log + ":bytes", b"".join(framed))
                pipe.append(log + ":sizes", b"".join(b"%08d" % len(f) for f in framed))
                pipe.expire(log + ":bytes", 3600)
                pipe.expire(log + ":sizes", 3600)
            return await pipe.execute()

    return {"per-stream": per_stream, "one-call": one_call, "compact": compact, "xadd": xadd,
            "append": append}


async def _loaded(client: Redis) -> dict[str, str]:
    return {"per-stream": await client.script_load(scripts.APPEND_EVENTS),
            "one-call": await client.script_load(scripts.APPEND_EVENTS_MANY)}


async def _measure(redis_pid: int, port: int, streams: int, events: int, flushes: int,
                   rounds: int, size: int) -> dict[str, tuple[float, float]]:
    client = Redis(host=HOST, port=port)
    writers = _writers(client, await _loaded(client))
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


async def _count(redis: Callgrind, port: int, streams: int, events: int, flushes: int,
                 size: int) -> dict[str, float]:
    client = Redis(host=HOST, port=port)
    writers = _writers(client, await _loaded(client))
    counted: dict[str, float] = {}
    try:
        redis.on()
        for method in METHODS:
            await _setup(client, streams)
            redis.dump()  # the set-up's and the idle time's, not counted
            seq = 0
            for _ in range(flushes):
                await writers[method](_batch(streams, events, seq, size))
                seq += events
            counted[method] = redis.dump() / (streams * events * flushes)
    finally:
        await client.aclose()
    return counted


def count(streams: int, events: int, flushes: int,
          size: int = DELTA_BYTES) -> dict[str, float]:
    """redis-server's instructions per event by method (`--count`), under callgrind."""
    folder = Path(tempfile.mkdtemp(prefix="bench-appends-cg-"))
    out = folder / "redis.cg"
    wrapper = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}")
    try:
        with redis_beside_proxy("bench-appends-", wrapper) as (pid, port):
            return asyncio.run(_count(Callgrind(pid, "redis-server", out), port, streams,
                                      events, flushes, size))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def counted_table(counted: dict[str, float]) -> list[str]:
    base = counted["one-call"]
    return ["| method | redis-server instructions / event | x one-call |", "|---|---:|---:|",
            *[f"| {method} | {n:,.0f} | {n / base:.2f} |" for method, n in counted.items()]]


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
    parser.add_argument("--count", action="store_true",
                        help="redis-server's instructions per event under callgrind instead")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.count:
        print(f"{args.streams} streams x {args.events} event(s) of {args.event_bytes} bytes per "
              f"flush, {args.flushes} flushes, counted")
        print("\n".join(counted_table(count(args.streams, args.events, args.flushes,
                                             args.event_bytes))))
        return 0
    results = run(args.streams, args.events, args.flushes, args.rounds, args.event_bytes)
    print(f"{args.streams} streams x {args.events} event(s) of {args.event_bytes} bytes per flush, "
          f"{args.flushes} flushes "
          f"x {args.rounds} rounds, interleaved")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
