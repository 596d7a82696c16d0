"""`make chaos` rows for a Redis Cluster: a primary SIGKILLed under load (the cluster
promotes its replica), and slots migrated under load (`redis-cli --cluster reshard`).

Topology: 6 nodes, 3 primaries with a replica each (tests/support/cluster.py,
`cluster-node-timeout` 1 s); two proxy instances (A takes creates and background jobs, B
streams) and a worker process on `redis+cluster://`, leases of 5 s (longer than the failover,
as for Sentinel: reliability/failover.py). The load and the tally are failover.py's: 8 clients
of stored creates, 8 of stored streams, a background job every 100 ms; "lost" = acknowledged
and then not found as it was; "left" = still queued/in_progress 15 s after the load stopped.

Replication is asynchronous here too: a primary killed loses what it acknowledged and had not
sent (on loopback, next to nothing; no forwarder lag is added: the Sentinel rows measure that).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from reliability.failover import AFTER, FLAGS, FailoverLoad, judge
from reliability.lab import Lab, wait_for
from tests.support.cluster import RedisClusterGroup
from tests.support.servers import start_proxy, start_simulator, start_worker

# Slots moved by the migration row: every slot of one primary (`redis-cli --cluster create`
# gives each of 3 primaries 5461 or 5462), so every tag the instances draw on it moves, with
# creates, streams and final writes in flight on them; new responses then rebalance over the
# two primaries left (store/connection/shards.py).
MIGRATED_SLOTS = 5461


def _start(running: Lab, tag: str) -> tuple[RedisClusterGroup, FailoverLoad, str]:
    group = RedisClusterGroup()
    running.on_close(group.stop)
    url = group.url()
    sim = running.keep(start_simulator())
    a = running.keep(start_proxy(sim.url, *FLAGS, redis_url=url))
    b = running.keep(start_proxy(sim.url, *FLAGS, redis_url=url))
    running.keep(start_worker(sim.url, url, "--heartbeat-interval", "0.5"))
    load = FailoverLoad(a.url, b.url, tag).start()
    running.on_close(load.stop)
    wait_for(lambda: len(load.seen.creates) >= 200, 60)
    return group, load, b.url


def cluster_primary_killed(running: Lab) -> tuple[str, str, int, bool]:
    group, load, base = _start(running, "cluster-kill")
    victim = group.primaries()[0]
    killed = time.monotonic()
    victim.signal(signal.SIGKILL)
    group.wait_failed_over(victim)
    promoted = time.monotonic() - killed
    time.sleep(AFTER)
    load.stop()
    time.sleep(15)  # the lease sweep (5 s leases) and the job reclaim (0.5 s heartbeats)
    return _clean(load, judge(load.seen, base, killed, promoted, 0))


def cluster_slots_migrated(running: Lab) -> tuple[str, str, int, bool]:
    group, load, base = _start(running, "cluster-reshard")
    source, target = group.primaries()[:2]
    started = time.monotonic()
    group.reshard(source, target, MIGRATED_SLOTS)
    took = time.monotonic() - started
    time.sleep(AFTER)
    load.stop()
    time.sleep(15)
    return _clean(load, judge(load.seen, base, started, took, 0, event="the migration ended",
                              fault="it started"))


def _clean(load: FailoverLoad, judged: tuple[str, str, int, bool]) -> tuple[str, str, int, bool]:
    """Also: every failure was clean (a 503, or a stream that ended), none a 500, a reply that
    was no JSON, or a stream cut off."""
    client, what, lost, ok = judged
    codes = [code for _, _, code, _ in load.seen.creates] + [code for code, _ in load.seen.jobs]
    cut = [outcome for outcome, _ in load.seen.streams if outcome in ("cut", "HTTP 500")]
    return client, what, lost, ok and not cut and not {0, 500} & set(codes)


ROWS: tuple[tuple[str, str, Callable[[Lab], tuple[str, str, int, bool]]], ...] = (
    ("cluster-primary-killed", "a Redis Cluster primary SIGKILLed under load (8 create "
     "clients, 8 stream clients, a job every 100 ms; two instances and a worker), its replica "
     "promoted by the cluster", cluster_primary_killed),
    ("cluster-slots-migrated", f"every slot of one primary ({MIGRATED_SLOTS}, with their keys) "
     "moved to another by `redis-cli --cluster reshard` under the same load",
     cluster_slots_migrated),
)
