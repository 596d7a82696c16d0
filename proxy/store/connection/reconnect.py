"""`Reconnector`: what the store does before it retries a write that failed, so that a retry
against a stuck or replaced primary costs a short probe, not another full socket timeout.

Why: a frozen primary (SIGSTOP, a partition) accepts connections and answers nothing, so every
command waits out the socket timeout (5 s). The final write of a response is retried five times
(services/eventlog/durable.py): 16 streams ending on a frozen primary stayed stuck 30 s, each
retry waiting the full timeout again. Before a retry:
- the pool's idle connections are dropped: they may point at a primary that is gone or stuck;
  on Sentinel the next connection asks the sentinels for the primary again (redis-py's
  SentinelConnectionPool resolves it on every new connection), so it follows a promotion;
- a PING goes through `probe`, a client of the same target whose socket timeout is short
  (`PROBE_TIMEOUT`): a primary that does not answer that fails the attempt in a second,
  without sending the write.
Connections in use are left alone: other requests' commands may be running on them fine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis

from proxy.store.connection.failures import store_errors

# Seconds a probe PING may take. Redis answers one in well under a millisecond unless it is
# stuck: even a long script or a big flush ahead of it takes tens of milliseconds.
PROBE_TIMEOUT = 1.0


class Reconnector:
    def __init__(self, client: Redis, probe: Redis,
                 closers: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        self._client = client
        self._probe = probe
        # Other things the factory opened for this target (the sentinels' clients).
        self._closers = tuple(closers)

    async def reconnect(self) -> None:
        """Raise `StoreUnavailable` unless a fresh connection to the (current) primary answers
        within the probe's timeout."""
        with store_errors():
            await self._client.connection_pool.disconnect(inuse_connections=False)
            await self._probe.ping()

    async def aclose(self) -> None:
        await self._probe.aclose(close_connection_pool=True)
        for close in self._closers:
            await close()
