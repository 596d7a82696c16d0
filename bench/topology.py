"""`python -m bench.topology`: the same stored-stream load on one Redis primary and on a Redis
Cluster of 3 primaries (3 replicas), through the store as the proxy drives it (what Cluster costs).

Load, per round: `--streams` stored foreground streams, each created with its lease (one
script), `--tokens` flushes of one event per stream (every live stream's events in one flush:
one call on one primary, one call per shard tag on the cluster), the final write (object,
output item index, ledger) and the lease dropped. The ids are the ones an instance makes on
that topology (store/connection/shards.py: shard-tagged on the cluster, two tags per primary).

Reported per 1,000 tokens (events): Redis CPU of each primary (utime+stime from /proc; on the
cluster, replicas apart), the CPU of this process (the proxy's share of the store work: building
and sending the commands, reading the replies), and the keys each primary holds afterwards.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.options import module_parser
from proxy.core import ids as idp
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import Backend, open_backend
from tests.support.cluster import RedisClusterGroup, _client
from tests.support.servers import ServerProcess, start_redis

CLK_TCK = os.sysconf("SC_CLK_TCK")
DELTA = (b'{"type":"response.output_text.delta","item_id":"msg_0123456789abcdef",'
         b'"output_index":0,"content_index":0,"delta":" word","logprobs":[],'
         b'"sequence_number":%d}')
TENANT = "k" * 64


@dataclass
class Figures:
    topology: str
    redis_ms: list[float]  # per primary, per 1k tokens
    replicas_ms: float  # all replicas together, per 1k tokens
    proxy_ms: float
    keys: list[int]  # per primary


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def one_round(backend: Backend, streams: int, tokens: int) -> None:
    store = backend.store
    ids = [backend.ids(idp.RESPONSE) for _ in range(streams)]
    for rid in ids:
        await store.create_response(ResponseRecord(
            {"id": rid, "object": "response", "status": "in_progress", "output": []}, TENANT),
            [{"id": f"in_{rid}", "type": "message", "role": "user", "content": "q"}],
            ttl=3600, event_ttl=3600, lease_ms=30_000)
    for seq in range(tokens):
        await store.append_events({rid: [StoredEvent(seq, "response.output_text.delta",
                                                     DELTA % seq)] for rid in ids}, ttl=3600)
    for rid in ids:
        final = {"id": rid, "object": "response", "status": "completed", "output": [
            {"id": f"msg_{rid}", "type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "word " * tokens}]}]}
        await store.finish_response(final, StoredEvent(tokens, "response.completed", b"{}"),
                                    tenant=TENANT, ttl=3600, event_ttl=3600)
    if backend.leases is not None:
        await backend.leases.renew(ttl_ms=30_000, dropped=ids)


async def measure(url: str, primaries: Sequence[ServerProcess],
                  replicas: Sequence[ServerProcess], streams: int, tokens: int,
                  rounds: int) -> tuple[list[float], float, float]:
    backend = open_backend(url)
    try:
        await backend.store.ping()
        await one_round(backend, 8, 4)  # scripts loaded, connections open
        before = [cpu_seconds(p.proc.pid) for p in [*primaries, *replicas] if p.proc]
        mine = time.process_time()
        for _ in range(rounds):
            await one_round(backend, streams, tokens)
        mine = time.process_time() - mine
        after = [cpu_seconds(p.proc.pid) for p in [*primaries, *replicas] if p.proc]
    finally:
        await backend.store.aclose()
    per_k = 1000 / (streams * tokens * rounds)
    used = [(b - a) * 1000 * per_k for a, b in zip(before, after, strict=True)]
    return used[:len(primaries)], sum(used[len(primaries):]), mine * 1000 * per_k


def dbsize(port: int) -> int:
    with _client(port) as client:
        return int(client.dbsize())


def run(streams: int, tokens: int, rounds: int) -> list[Figures]:
    found = []
    single = start_redis()
    try:
        redis_ms, _, proxy_ms = asyncio.run(measure(
            f"redis://127.0.0.1:{single.port}/0", [single], [], streams, tokens, rounds))
        found.append(Figures("one primary", redis_ms, 0.0, proxy_ms, [dbsize(single.port)]))
    finally:
        single.stop()
    cluster = RedisClusterGroup()
    try:
        primaries = cluster.primaries()
        replicas = [n for n in cluster.nodes if n not in primaries]
        redis_ms, replicas_ms, proxy_ms = asyncio.run(measure(
            cluster.url(), primaries, replicas, streams, tokens, rounds))
        found.append(Figures("cluster, 3 primaries", redis_ms, replicas_ms, proxy_ms,
                             [dbsize(p.port) for p in primaries]))
    finally:
        cluster.stop()
    return found


def table(rows: list[Figures]) -> list[str]:
    lines = ["| topology | Redis CPU per primary, ms / 1k tokens | replicas (all), ms / 1k | "
             "store client CPU, ms / 1k tokens | keys per primary |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.topology} | {' / '.join(f'{ms:.2f}' for ms in row.redis_ms)} | "
                     f"{row.replicas_ms:.2f} | {row.proxy_ms:.2f} | "
                     f"{' / '.join(str(k) for k in row.keys)} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.topology", __doc__)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print("\n".join(table(run(args.streams, args.tokens, args.rounds))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
