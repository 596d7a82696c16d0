"""`python -m bench.eventwriter`: the event-log writer alone, per stored token.

Where a stored token's proxy work goes, without the network, the simulator or Redis: the
writer of services/eventlog/writer.py as a stored stream drives it (`LogHandle.record` once a
token, as services/generation/run.py calls it) for `--streams` streams nobody else follows, a
timed flush (`flush_window`) every `--per-window` tokens (20 ms tokens, 100 ms windows: 5),
into a store that packs each flush as the real one does (store/lua/packing.py `flush_calls`,
then hiredis's `pack_command`) and sends nothing. Text deltas shaped as the assembler makes
them, so runs are cut compact as by default (`--event-log-format full`: `--full`).

Reported per token: the Python opcodes each function of the writer and the packing runs
(`sys.settrace`, exact whatever the machine does), and the CPU time of the calls (`record`, the
flushes; this process, untraced, on a second pass). `bench.instructions` counts the whole
proxy's extra per stored token (~8k instructions); this says how much of it the writer's own
Python is, and where. Its instructions: `--no-trace` under callgrind at two `--tokens`, the
difference over the difference of tokens.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import hiredis
import orjson

from bench.options import module_parser
from proxy.core import types as t
from proxy.services.eventlog.writer import EventLogHub
from proxy.store.base import EventRow
from proxy.store.lua.packing import flush_calls, hash_key

ITEM = "msg_" + "7f" * 24
TracedCall = Callable[[FrameType, str, Any], Any]


class PackingStore:
    """A store whose flush packs its calls as `RedisStore.append_events` would and stops there."""

    def __init__(self, compact: bool) -> None:
        self.compact = compact
        self.calls = 0
        self.events = 0

    async def append_events(self, batches: dict[str, Sequence[EventRow]], *,
                            ttl: int) -> tuple[str, ...]:
        self.events += sum(map(len, batches.values()))
        for _hashes, args in flush_calls(batches, hash_key, self.compact):
            command: tuple[Any, ...] = ("EVALSHA", "0" * 40, 0, ttl, *args)
            hiredis.pack_command(command)
            self.calls += 1
        return ()


@dataclass(frozen=True)
class Figures:
    tokens: int  # stored tokens in all (streams x tokens)
    opcodes: dict[str, float]  # Python opcodes per token by function
    record_us: float  # CPU µs per token in `record`
    flush_us: float  # CPU µs per token in the flushes
    flushes: int  # store calls made
    stored: int  # events that reached the store (every token once)


def _tokens(count: int) -> list[tuple[list[dict[str, Any]], list[tuple[str, bytes]]]]:
    """Each token's batch as the turn hands it on: its event and its (type, JSON)."""
    made = []
    for seq in range(2, count + 2):  # events 0 and 1 are the start, in the record
        event = {"type": t.TEXT_DELTA, "sequence_number": seq, "item_id": ITEM,
                 "output_index": 0, "content_index": 0, "delta": f" w{seq}", "logprobs": []}
        made.append(([event], [(t.TEXT_DELTA, orjson.dumps(event))]))
    return made


async def _drive(streams: int, tokens: int, per_window: int, compact: bool,
                 timed: bool) -> tuple[float, float, PackingStore]:
    store = PackingStore(compact)
    hub = EventLogHub(store, ttl=3600, event_ttl=3600,  # type: ignore[arg-type]
                      locally_followed=frozenset())
    # The flusher stands idle (`open` starts none while one runs): the flushes are this
    # loop's, one every `per_window` tokens.
    idle = hub._task = asyncio.get_running_loop().create_task(_idle())
    try:
        return await _flushed(hub, streams, tokens, per_window, timed, store)
    finally:
        idle.cancel()


async def _idle() -> None:
    await asyncio.Event().wait()


async def _flushed(hub: EventLogHub, streams: int, tokens: int, per_window: int, timed: bool,
                   store: PackingStore) -> tuple[float, float, PackingStore]:
    handles = [hub.open(f"resp_{n:05d}", early=False) for n in range(streams)]
    batches = _tokens(tokens)
    record_s = flush_s = 0.0
    clock = time.process_time if timed else (lambda: 0.0)
    for k, (events, encoded) in enumerate(batches):
        started = clock()
        for handle in handles:
            handle.record(events, encoded)
        record_s += clock() - started
        if k % per_window == per_window - 1:
            started = clock()
            await hub.flush_window()
            flush_s += clock() - started
    started = clock()
    await hub.flush_now()
    flush_s += clock() - started
    return record_s, flush_s, store


def _counting(counts: collections.Counter[str]) -> TracedCall:
    def on_call(frame: FrameType, event: str, _arg: Any) -> Any:
        name = frame.f_code.co_qualname
        frame.f_trace_opcodes = True

        def on_opcode(_frame: FrameType, what: str, _arg: Any) -> Any:
            if what == "opcode":
                counts[name] += 1
            return on_opcode
        return on_opcode
    return on_call


def measure(streams: int = 64, tokens: int = 430, per_window: int = 5,
            compact: bool = True, traced: bool = True) -> Figures:
    """`traced` False: no opcode pass (the timed one alone: what to run under callgrind)."""
    counts: collections.Counter[str] = collections.Counter()

    async def counted() -> tuple[float, float, PackingStore]:
        sys.settrace(_counting(counts))
        try:
            return await _drive(streams, tokens, per_window, compact, timed=False)
        finally:
            sys.settrace(None)

    if traced:
        asyncio.run(counted())
    for harness in ("_drive", "_flushed", "_idle"):  # the harness's own steps
        counts.pop(harness, None)
    record_s, flush_s, store = asyncio.run(_drive(streams, tokens, per_window, compact,
                                                  timed=True))
    n = streams * tokens
    return Figures(n, {name: c / n for name, c in counts.most_common()},
                   record_s * 1e6 / n, flush_s * 1e6 / n, store.calls, store.events)


def table(figures: Figures, top: int = 12) -> list[str]:
    lines = [f"{figures.tokens} stored tokens, {figures.flushes} store calls: "
             f"record {figures.record_us:.2f} µs, flushes {figures.flush_us:.2f} µs a token; "
             f"{sum(figures.opcodes.values()):.1f} Python opcodes a token",
             "| function | opcodes / token |", "|---|---:|"]
    lines += [f"| {name} | {n:.2f} |" for name, n in list(figures.opcodes.items())[:top]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.eventwriter", __doc__)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=430, help="tokens per stream")
    parser.add_argument("--per-window", type=int, default=5, help="tokens between flushes")
    parser.add_argument("--full", action="store_true", help="entries in full, not compact")
    parser.add_argument("--no-trace", action="store_true",
                        help="no opcode count: the timed pass alone (to run under callgrind)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    figures = measure(args.streams, args.tokens, args.per_window, compact=not args.full,
                      traced=not args.no_trace)
    print("\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
