"""`ReplicaWait`: `--redis-wait-replicas N`, Redis `WAIT` after the writes a client is told
about: a response's create (its id, a background job's acceptance) and its final write (the
answer). Replication is asynchronous: what the primary acknowledged and had not yet sent when
it died is gone from the replica that Sentinel promotes. With N > 0 such a write returns only
once N replicas hold it (everything the connection wrote before it, since replication keeps
order), so a failover cannot take back what a client was told.

Bounded: WAIT gives up after `WAIT_TIMEOUT_MS`. Fewer replicas in time is logged and counted
(`shortfalls`, /metrics `proxy_redis_wait_shortfalls`), not an error: the write holds on the
primary and the answer is real (the stream was generated, the tokens spent); failing it would
turn a lagging replica into failed requests, and their retries into generations run twice.
What is at risk is only that a failover in the next moments loses it.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import exceptions as rex
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

log = logging.getLogger("proxy.store")

# A replica on the same network acknowledges within milliseconds; one that takes a second is
# lagging or gone, and waiting longer would only hold the stream (and its connection) for
# nothing. Well under the socket timeout, which must not fire first.
WAIT_TIMEOUT_MS = 1_000


class ReplicaWait:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas  # 0: no WAIT
        self.shortfalls = 0

    async def run(self, client: Redis, script: AsyncScript, keys: list[str],
                  args: list[Any]) -> Any:
        """`script`'s reply, once `replicas` replicas hold its write (or the wait timed out)."""
        try:
            reply, acked = await self._evalsha_and_wait(client, script, keys, args)
        except rex.NoScriptError:
            # Not run (a restarted or new primary without our scripts): loaded, sent again.
            await client.script_load(script.script)
            reply, acked = await self._evalsha_and_wait(client, script, keys, args)
        if int(acked) < self.replicas:
            self.shortfalls += 1
            log.warning("a write acknowledged by %s of %d replica(s) within %d ms",
                        acked, self.replicas, WAIT_TIMEOUT_MS)
        return reply

    async def _evalsha_and_wait(self, client: Redis, script: AsyncScript, keys: list[str],
                                args: list[Any]) -> list[Any]:
        # WAIT counts the writes of the connection it is sent on: hence one pipeline. EVALSHA
        # itself, not the script object: redis-py's pipeline would first ask whether the script
        # is loaded (one more round trip per write).
        async with client.pipeline(transaction=False) as pipe:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.replicas, WAIT_TIMEOUT_MS)
            replies: list[Any] = await pipe.execute()
        return replies
