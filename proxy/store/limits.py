"""`LimitStore`: the per-key limit counters (keys.limit_*), each check and its write one Lua
script (scripts.LIMIT_*), so two instances admitting at once cannot both take the last slot.

A thin adapter, like leases.py: one round trip per call, every failure of the server a
`StoreUnavailable`. What the limits mean (fail open or closed, tickets, renewals) is
services/limits.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from proxy.core.keysfile import Limits
from proxy.store import keys, scripts
from proxy.store.redis import store_errors


class LimitStore:
    def __init__(self, client: Redis) -> None:
        self._admit = client.register_script(scripts.LIMIT_ADMIT)
        self._finish = client.register_script(scripts.LIMIT_FINISH)
        self._renew = client.register_script(scripts.LIMIT_RENEW)

    async def admit(self, tenant: str, limits: Limits, *, lease: str | None,
                    lease_ms: int) -> tuple[str, int]:
        """("ok", 0), or (the limit reached: rpm, tpm, streams, budget; seconds to retry).
        `lease`: the stream slot to take (None: the request holds none)."""
        with store_errors():
            verdict, retry = await self._admit(
                keys=_keys(tenant),
                args=[limits.rpm or 0, limits.tpm or 0, limits.token_budget or 0,
                      limits.max_streams or 0, lease or "", lease_ms])
        return (verdict.decode() if isinstance(verdict, bytes) else str(verdict)), int(retry)

    async def finish(self, tenant: str, tokens: int, *, lease: str | None,
                     per_minute: bool, in_total: bool) -> None:
        """Free `lease` and count `tokens` in the minute and/or in the total."""
        with store_errors():
            await self._finish(keys=_keys(tenant),
                               args=[max(0, tokens), lease or "", "1" if per_minute else "0",
                                     "1" if in_total else "0"])

    async def renew(self, tenant: str, leases: Sequence[str], *, lease_ms: int,
                    adopt: bool = False) -> None:
        """Extend `leases` by `lease_ms`; `adopt`: take them even if they lapsed (a worker
        taking over a job's slot), else only while they still exist."""
        with store_errors():
            await self._renew(keys=[keys.limit_streams(tenant)],
                              args=[lease_ms, "adopt" if adopt else "renew", *leases])


def _keys(tenant: str) -> list[str]:
    return [keys.limit_minute(tenant), keys.limit_used(tenant), keys.limit_streams(tenant)]
