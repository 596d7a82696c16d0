"""`LimitStore`: the per-key limit counters (keys.limit_*), each check and its write one Lua
script (LIMIT_* below, kept with their adapter as the conversation scripts are), so two
instances admitting at once cannot both take the last slot.

A thin adapter, like leases.py: one round trip per call, every failure of the server a
`StoreUnavailable`. What the limits mean (fail open or closed, tickets, renewals) is
services/metering/limits.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from redis.asyncio import Redis

from proxy.core.policy.keysfile import Limits
from proxy.store import keys
from proxy.store.redis import store_errors

# -- the scripts (services/metering/limits.py; keys in keys.py "per-key limits") ---------
# ------------------- Time is the Redis server's (TIME), never an instance's: every instance sees
# the same minute and the same lease expiries. A limit of 0 means "no limit of that kind".

# Shared: `now()` → seconds, milliseconds; `window(key, sec)` → the minute's (requests, tokens)
# or (0, 0) when the hash holds another minute.
_LIMIT_CLOCK: Final = """
local function now()
  local t = redis.call('TIME')
  local sec = tonumber(t[1])
  return sec, sec * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function window(key, sec)
  local held = redis.call('HMGET', key, 'w', 'r', 't')
  if tonumber(held[1]) ~= math.floor(sec / 60) then return 0, 0 end
  return tonumber(held[2] or '0'), tonumber(held[3] or '0')
end
"""

# KEYS: limit_minute, limit_used, limit_streams.
# ARGV: rpm, tpm, token_budget, max_streams, lease id ('' for a request that holds no stream
# slot: the slot check is skipped), lease ms.
# Every check runs before any write, so a refused request consumes nothing. Returns
# {verdict, retry_after_seconds}: verdict 'ok', 'budget', 'tpm', 'rpm' or 'streams'.
LIMIT_ADMIT: Final = _LIMIT_CLOCK + """
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local budget, streams = tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[5] == '' then streams = 0 end  -- a request without a lease takes no stream slot
local sec, ms = now()
local minute = math.floor(sec / 60)
local next_minute = 60 - (sec % 60)
if budget > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= budget then
  return {'budget', 0}
end
local requests, tokens = window(KEYS[1], sec)
if tpm > 0 and tokens >= tpm then return {'tpm', next_minute} end
if rpm > 0 and requests >= rpm then return {'rpm', next_minute} end
if streams > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms)
  if redis.call('ZCARD', KEYS[3]) >= streams then return {'streams', 1} end
end
if rpm > 0 or tpm > 0 then
  redis.call('HSET', KEYS[1], 'w', minute, 'r', requests + 1, 't', tokens)
  redis.call('PEXPIRE', KEYS[1], 120000)  -- keys.LIMIT_MINUTE_TTL_MS
end
if streams > 0 then
  local lease_ms = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], ms + lease_ms, ARGV[5])
  redis.call('PEXPIRE', KEYS[3], 2 * lease_ms)
end
return {'ok', 0}
"""

# KEYS: limit_minute, limit_used, limit_streams.
# ARGV: tokens used, lease id ('' for none), count per minute ('1'/'0'), count in total.
# The end of an admitted request: its stream slot freed, its tokens added to the minute in
# which it ended and to the total.
LIMIT_FINISH: Final = _LIMIT_CLOCK + """
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[3], ARGV[2]) end
local used = tonumber(ARGV[1])
if used > 0 and ARGV[3] == '1' then
  local sec = now()
  local requests, tokens = window(KEYS[1], sec)
  redis.call('HSET', KEYS[1], 'w', math.floor(sec / 60), 'r', requests, 't', tokens + used)
  redis.call('PEXPIRE', KEYS[1], 120000)  -- keys.LIMIT_MINUTE_TTL_MS
end
if used > 0 and ARGV[4] == '1' then redis.call('INCRBY', KEYS[2], used) end
return 1
"""

# KEYS: limit_streams. ARGV: lease ms, 'renew' or 'adopt', then lease ids. `renew` pushes the
# leases this instance still holds forward (XX: a lease already dropped as expired is not
# brought back); `adopt` (a worker starting a background job) takes the job's lease whatever
# became of it while the job was queued: the job runs now, so it counts now.
LIMIT_RENEW: Final = _LIMIT_CLOCK + """
local _, ms = now()
local lease_ms = tonumber(ARGV[1])
for i = 3, #ARGV do
  if ARGV[2] == 'adopt' then
    redis.call('ZADD', KEYS[1], ms + lease_ms, ARGV[i])
  else
    redis.call('ZADD', KEYS[1], 'XX', ms + lease_ms, ARGV[i])
  end
end
redis.call('PEXPIRE', KEYS[1], 2 * lease_ms)
return 1
"""


class LimitStore:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._admit = client.register_script(LIMIT_ADMIT)
        self._finish = client.register_script(LIMIT_FINISH)
        self._renew = client.register_script(LIMIT_RENEW)

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

    async def used(self, tenant: str) -> int:
        """The key's tokens counted in total (its `token_budget`'s spent part)."""
        with store_errors():
            held = await self._client.get(keys.limit_used(tenant))
        return int(held or 0)

    async def renew(self, tenant: str, leases: Sequence[str], *, lease_ms: int,
                    adopt: bool = False) -> None:
        """Extend `leases` by `lease_ms`; `adopt`: take them even if they lapsed (a worker
        taking over a job's slot), else only while they still exist."""
        with store_errors():
            await self._renew(keys=[keys.limit_streams(tenant)],
                              args=[lease_ms, "adopt" if adopt else "renew", *leases])


def _keys(tenant: str) -> list[str]:
    return [keys.limit_minute(tenant), keys.limit_used(tenant), keys.limit_streams(tenant)]
