"""The storage ledger: how many bytes each client key holds in the store, so a per-key budget
(`max_stored_bytes`, core/policy/storagebudget.py) can bound what one key keeps in the Redis every
key shares (docs/contract.md, "Multi-tenant safety").

What counts: the response object, its input items and its ancestor list (the bulk a request
sends and the store keeps for `--response-ttl`), a conversation's object, metadata and items,
uploaded files (files.py), prompt templates (prompts.py) and each vector store's chunks of a
file (vectors.py: per store, so one file copied into many stores counts many times). What does
not: event logs (they live `--event-ttl`, an hour by default, and hold what the fleet generated,
which its speed and the key's `tpm` bound; counting them would put ledger writes on the event
flush, the hot path) and item index entries (a location of a few bytes per item, at most
`--max-input-items` per request).

Redis has no expiry callback, so bytes are counted by when they stop counting:

    lim:{<tenant>}:stored   HASH  <bucket end, unix seconds> -> bytes

A write counts its record's bytes in the bucket holding the record's expiry (now + ttl, rounded
up past it to a bucket of a 30th of the TTL: about 31 live fields for any TTL, one a day at 30
days).
The record keeps how many bytes it counted and in which bucket (keys.F_STORED_BYTES,
F_STORED_UNTIL), so a write that renews its TTL moves exactly those bytes to the new bucket and
a delete takes them out. Bytes held = the sum of the buckets whose end has not passed; passed
ones are dropped by the scripts that read the sum. Rounding up means bytes stop counting at
most one bucket (a day at 30 days) after their record expired: the ledger errs on the side of
counting, never of forgetting.

Every check and its count are one script (scripts.py CREATE_RESPONSE; conversations.py
CREATE_CONVERSATION, ADD_CONVERSATION_ITEMS): two instances cannot both take the last bytes. A
write is refused when the key already holds its budget or more; the write that crosses it is
let through, so a key may overshoot by one request's bytes (at most `--max-body-bytes`) plus
the outputs of its responses then running (the final write counts its output and is never
refused: the answer was generated). The clock is the Redis server's (TIME), the one its TTLs
run on.

The Lua pieces here are prepended to the scripts that write a record (scripts.py,
conversations.py).
"""

from __future__ import annotations

from typing import Final

# `ledger_now()`: seconds on the server's clock.
# `ledger_until(now, ttl)`: the bucket that bytes written now for `ttl` seconds are counted in.
# `ledger_held(ledger, now)`: bytes the ledger counts now; passed buckets are dropped.
# `ledger_set(ledger, record, now, size, ends[, old])`: `record`'s previous count leaves its
#   bucket and `size` bytes (0: none, a delete) are counted in bucket `ends`, noted on the
#   record. The ledger lives as long as its latest bucket. `old`: the record's `bytes` and
#   `until` fields when the caller read them already (else read here).
LEDGER: Final = """
local function ledger_now()
  return tonumber(redis.call('TIME')[1])
end

local function ledger_until(now, ttl)
  -- `now` is whole seconds (TIME's first half): the true time is up to a second later, so the
  -- bucket is taken from now + 1 + ttl. From now + ttl, bytes written at x.9 s with a one-second
  -- TTL stopped counting 0.1 s later while their record lived on for 0.9 s.
  local width = math.max(1, math.ceil(tonumber(ttl) / 30))
  return math.ceil((now + 1 + tonumber(ttl)) / width) * width
end

local function ledger_held(ledger, now)
  local buckets = redis.call('HGETALL', ledger)
  local held = 0
  for i = 1, #buckets, 2 do
    if tonumber(buckets[i]) <= now then
      redis.call('HDEL', ledger, buckets[i])
    else
      held = held + tonumber(buckets[i + 1])
    end
  end
  return held
end

local function ledger_set(ledger, record, now, size, ends, old)
  old = old or redis.call('HMGET', record, 'bytes', 'until')
  local old_size, old_until = tonumber(old[1]), tonumber(old[2])
  local bucket = string.format('%d', ends)
  local was_counted = old_size and old_until and old_until > now
  local counts = size > 0 and ends > now
  if counts and was_counted and old[2] == bucket then
    -- Counted again in its own bucket (a final write soon after its create): one HINCRBY
    -- moves the difference, where taking the old count out and adding the new one ran three
    -- commands. A bucket found holding less than the old count is left holding `size`, as
    -- the way out would have.
    if redis.call('HINCRBY', ledger, bucket, size - old_size) < size then
      redis.call('HSET', ledger, bucket, size)
    else
      -- The bucket held at least the old count: the ledger existed with the TTL the write
      -- that counted it there gave it (at least to this bucket's end, running down with it),
      -- so it needs no TTL read (a command fewer per final write).
      redis.call('HSET', record, 'bytes', size, 'until', bucket)
      return
    end
  else
    if was_counted then
      local left = tonumber(redis.call('HGET', ledger, old[2]) or '0') - old_size
      if left > 0 then
        redis.call('HSET', ledger, old[2], left)
      else
        redis.call('HDEL', ledger, old[2])
      end
    end
    if counts and redis.call('HINCRBY', ledger, bucket, size) > size then
      -- The bucket held bytes already (most writes: a bucket is a 30th of the TTL wide): the
      -- ledger has the TTL the write that counted them there gave it, as above.
      redis.call('HSET', record, 'bytes', size, 'until', bucket)
      return
    end
  end
  if counts then
    redis.call('HSET', record, 'bytes', size, 'until', bucket)
    if redis.call('TTL', ledger) < ends - now then
      redis.call('EXPIRE', ledger, ends - now)
    end
  end
end
"""

# Bytes a key holds now. KEYS: ledger. Returns the sum (dropping passed buckets on the way).
LEDGER_HELD: Final = LEDGER + """
return ledger_held(KEYS[1], ledger_now())
"""
