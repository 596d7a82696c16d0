"""The Lua scripts: everything that must be atomic, one constant each, registered once per store.

Conventions every script keeps:
- It touches the keys of one slot: one response or conversation, and what it writes beside it
  (keys.py: on a cluster all of a shard tag's keys share `{<tag>}`), passed in KEYS; field
  names are the ones in keys.py. Declared, not built in Lua: while a cluster moves a slot,
  Redis 7.0 judges where a script may run by its declared keys alone. An undeclared key still
  on the old node was made a second time on the new one (redirected there by ASK), and
  `redis-cli --cluster reshard` then stopped at "Target key exists"; one already moved failed
  the script half-way on the old node ("non local key"), after its first writes (`make chaos`
  cluster-slots-migrated, tests/contract/test_cluster_slot_move.py). So the final write and
  the status compare-and-set get the tenant's ledger and index keys from their caller, and a
  cluster's flush (APPEND_EVENTS_MANY) declares every hash and log it writes, though it reads
  them from its argument. Left undeclared: the semantic cache's bucket sets (CACHE_ADD_VECTOR,
  CACHE_CANDIDATES, built from their arguments: cache entries, which a move may duplicate or
  lose). The conversation scripts live with their adapter (conversations.py), the limits' with
  theirs (limits.py), the ledger's shared Lua in ledger.py.
- JSON is never decoded here: objects and items travel as opaque strings (cjson would rewrite
  numbers and turn `[]` into `{}`). Whatever needs to be read or changed apart (status, tenant,
  metadata) lives in its own hash field.
- Tenancy is checked inside the script that writes, so a foreign tenant changes nothing and
  learns nothing: it gets the same answer as for a missing key.
- Every key a script writes gets its TTL renewed in the same script.
- Event logs only grow: an event whose sequence number is not above the log's last one is
  skipped (the order check is explicit rather than a caught XADD error, so any *other* error
  still surfaces as a bug).
"""

from __future__ import annotations

from typing import Final

from proxy.store.ledger import LEDGER

# Shared Lua pieces, prepended to the scripts that use them.

# `last_seq(log)`: the sequence number of a log's newest event (-1 for none). We never delete
# single entries, so the newest entry's id (`1-<seq>`) is the stream's last id.
_LAST_SEQ: Final = """
local function last_seq(log)
  local top = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
  if #top == 0 then return -1 end
  return tonumber(string.sub(top[1][1], 3))
end
"""

# `append_packed(log, blob, pos, stop)`: XADD the events packed into bytes `pos` to `stop - 1`
# of one argument, with ids `1-<seq>`, skipping any whose seq is not above the log's last (so a
# retried write adds nothing twice). One argument per call instead of three per event, which
# redis-py would encode one by one in Python. Records are separated by byte 1, fields (seq,
# type, data) by byte 0. Neither byte can occur inside a record: JSON escapes every control
# character, and types and numbers are plain ASCII. Reading the range in place (rather than a
# `string.sub` of it) spares a copy of every stream's part of the flush.
_APPEND_PACKED: Final = """
local function append_from(log, blob, pos, stop, last)
  local added = 0
  while pos < stop do
    local finish = string.find(blob, '\1', pos, true)
    if not finish or finish > stop then finish = stop end
    local a = string.find(blob, '\0', pos, true)
    local b = string.find(blob, '\0', a + 1, true)
    local seq = tonumber(string.sub(blob, pos, a - 1))
    if seq > last then
      redis.call('XADD', log, '1-' .. seq, 't', string.sub(blob, a + 1, b - 1),
                 'd', string.sub(blob, b + 1, finish - 1))
      last = seq
      added = added + 1
    end
    pos = finish + 1
  end
  return added, last
end

local function append_packed(log, blob, pos, stop)
  local added = append_from(log, blob, pos, stop, last_seq(log))
  return added
end
"""

# `now`: the server's clock in milliseconds (lease deadlines: instances whose clocks drift
# still agree on what has expired).
_NOW_MS: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# `record_bytes`: what the storage ledger counts for a response.
_RECORD_BYTES: Final = """
local function record_bytes(hash, input)
  return redis.call('HSTRLEN', hash, 'obj') + redis.call('HSTRLEN', hash, 'parents')
    + redis.call('STRLEN', input)
end
"""

# Statuses TRANSITION never moves away from (FINISH_RESPONSE lists what it accepts).
_TERMINAL: Final = """
local TERMINAL = {completed = true, incomplete = true, failed = true, cancelled = true}
"""

# -- responses ------------------------------------------------------------------------------

# Store a new response together with its input items and its first events, index its input
# items (keys.py, "the item index": NX, the same key resending an item keeps its first place),
# count its bytes in its key's storage ledger (ledger.py) and (a stored foreground response,
# services/eventlog/ownership.py) take its writer's lease, all in one call.
# KEYS: hash, input, log, leases, ledger, item index key*
# ARGV: ttl, event_ttl, status, tenant, obj, parents, logged, closed, input, replica,
#       lease ms ('0': take no lease), response id, index location, budget (bytes, '0': none)
#       [, packed events]
# Returns {1, bytes held before, bytes counted for this response}; or {0, bytes held} with
# nothing written when the key already holds its budget (the check and the count are one
# step: two instances cannot both take the last bytes).
# Fields are overwritten, not merged: a retried create writes the same values again, and its
# events are skipped as duplicates. Writing events marks the response as logged.
# The index entries, the ledger and the lease are the response's shard tag's (one slot with
# it, keys.py): written here, they cost no pipeline of redis-py's (about 0.1 ms of the proxy's
# CPU per call) nor, for the lease, a round trip of its own before the first event (issue 18).
# The lease's deadline is on the server's clock, as RENEW_LEASES sets it. It is taken last, so
# a create that failed (an error ends a script where it happens) leaves no lease behind.
CREATE_RESPONSE: Final = _LAST_SEQ + _APPEND_PACKED + LEDGER + _RECORD_BYTES + """
local sec = ledger_now()
local held = ledger_held(KEYS[5], sec)
local budget = tonumber(ARGV[14])
if budget > 0 and held >= budget then return {0, held} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'tenant', ARGV[4], 'obj', ARGV[5],
           'parents', ARGV[6], 'logged', ARGV[7], 'closed', ARGV[8], 'replica', ARGV[10])
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[9], 'EX', ARGV[1])
local size = record_bytes(KEYS[1], KEYS[2])
ledger_set(KEYS[5], KEYS[1], sec, size, ledger_until(sec, ARGV[1]))
if #ARGV >= 15 then
  append_packed(KEYS[3], ARGV[15], 1, #ARGV[15] + 1)
  redis.call('HSET', KEYS[1], 'logged', '1')
  redis.call('EXPIRE', KEYS[3], ARGV[2])
end
for i = 6, #KEYS do
  redis.call('SET', KEYS[i], ARGV[13], 'EX', ARGV[1], 'NX')
end
if ARGV[11] ~= '0' then""" + _NOW_MS + """
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[11]), ARGV[12])
end
return {1, held, size}
"""

# Append events to one response's log (one call per response, all pipelined together).
# KEYS: hash, log
# ARGV: event_ttl, packed events (see `append_packed`)
# Dropped whole: events of an unknown response (deleted, expired, never created: every read
# goes through the record's tenant check, so such a log could never be read, and writing it
# would resurrect a deleted response's log until its TTL), and events after `closed` (the
# terminal event is the last one a reader will ever see).
APPEND_EVENTS: Final = _LAST_SEQ + _APPEND_PACKED + """
local state = redis.call('HMGET', KEYS[1], 'tenant', 'logged', 'closed')
if not state[1] or state[3] == '1' then return 0 end
local added = append_packed(KEYS[2], ARGV[2], 1, #ARGV[2] + 1)
redis.call('EXPIRE', KEYS[2], ARGV[1])
if added > 0 and state[2] ~= '1' then
  redis.call('HSET', KEYS[1], 'logged', '1')
end
return added
"""

# Append the events of every live stream of this process: one call per flush, whatever the
# number of streams (the flusher's hot path, services/eventlog/writer.py). Per stream it does what
# APPEND_EVENTS does, with the same rules (unknown or closed responses dropped whole).
# Why one call and not one per stream: at 256 streams with tokens 20 ms apart every flush
# carries about one event per stream, so one script per stream meant one EVALSHA, its argument
# parsing and its Lua call set-up per token, in redis-server and in redis-py (measured in
# docs/BENCHMARKS.md, "Event-log appends").
# KEYS: on a Redis Cluster, every key the call writes, each stream's hash and log: the caller
#   makes one call per shard tag (core/shardtags.py), all of whose keys share one slot, and a
#   slot being moved is judged by the declared keys alone (see the conventions above). One
#   primary declares none. Either way the keys the script writes travel in the blob, `rp:...`
#   and `rp:...:log` (keys.py, checked by tests/integration/test_store_append_many.py).
# ARGV: event_ttl, blob. The blob holds one part per stream, separated by byte 2:
#   <response hash key> byte 3 <packed events (`append_packed`)>. ASCII made by the proxy.
# Returns the number of events added.
APPEND_EVENTS_MANY: Final = _LAST_SEQ + _APPEND_PACKED + """
local blob = ARGV[2]
local size = #blob
local pos = 1
local added = 0
while pos <= size do
  local stop = string.find(blob, '\2', pos, true) or (size + 1)
  local sep = string.find(blob, '\3', pos, true)
  local hash = string.sub(blob, pos, sep - 1)
  local state = redis.call('HMGET', hash, 'tenant', 'closed', 'last')
  if state[1] and state[2] ~= '1' then
    local log = hash .. ':log'
    -- `last`: the log's newest sequence number as of this script's previous call, which
    -- spares an XREVRANGE per stream and flush. Only this script keeps it; the others that
    -- append (create, finish) do so before it first runs or close the log, so a missing
    -- field (first flush) falls back to reading the log itself.
    local last = tonumber(state[3]) or last_seq(log)
    local n
    n, last = append_from(log, blob, sep + 1, stop, last)
    if n > 0 then
      redis.call('HSET', hash, 'logged', '1', 'last', last)
      redis.call('EXPIRE', log, ARGV[1])
    end
    added = added + n
  end
  pos = stop + 1
end
return added
"""

# Compare-and-set on the status.
# KEYS: hash, input, ledger (the tenant's, of the response's shard tag)
# ARGV: to, ttl, replace ('1' | '0'), obj, tenant, allowed_from*
# Returns nil if the response does not exist, else {changed (1|0), status, obj} as it is after
# the call. A terminal status is final whatever `allowed_from` says: a reclaimed job or a late
# writer can never resurrect a cancelled or finished response. The renewed TTL moves the
# response's bytes to their new bucket in its tenant's ledger. A record of another tenant than
# the one named (a caller's bug: the ledger would be the wrong one) is an error, nothing written.
TRANSITION: Final = _TERMINAL + LEDGER + _RECORD_BYTES + """
local state = redis.call('HMGET', KEYS[1], 'status', 'tenant')
local status, tenant = state[1], state[2]
if not status then return false end
if tenant and tenant ~= ARGV[5] then
  return redis.error_reply('ERR the response belongs to another tenant')
end
local allowed = false
if not TERMINAL[status] then
  for i = 6, #ARGV do
    if ARGV[i] == status then allowed = true break end
  end
end
if not allowed then
  return {0, status, redis.call('HGET', KEYS[1], 'obj')}
end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'obj', ARGV[4]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
if tenant then
  local sec = ledger_now()
  ledger_set(KEYS[3], KEYS[1], sec, record_bytes(KEYS[1], KEYS[2]), ledger_until(sec, ARGV[2]))
end
return {1, ARGV[1], redis.call('HGET', KEYS[1], 'obj')}
"""

# Store the final object, close the log and append the stream's last events (those not yet
# flushed, then the terminal one), all or nothing, index the output items (keys.py, "the item
# index") and count the final bytes in the tenant's storage ledger (never refused: the answer
# was generated; ledger.py). Those keys are the tenant's in the response's slot, declared as in
# CREATE_RESPONSE; a record of another tenant than the one named is an error, nothing written.
# KEYS: hash, input, log, ledger, output item index key*
# ARGV: status (terminal), obj, ttl, event_ttl, index location, packed events ('' for none),
#       tenant
# The events are packed as APPEND_EVENTS_MANY packs them (`append_packed`: one argument, not
# three per event), in order. Carrying the stream's pending events here spares a short stream
# its own flush before the end (services/eventlog/writer.py). An event whose seq is not above the
# log's last is skipped, so a retried call (the first one landed, its reply lost) adds nothing:
# it is refused anyway, the log being closed.
# Accepted from queued / in_progress; and once from a `cancelled` whose log is still open when
# the final object is `cancelled` too: the cancel endpoint only flips the status, the worker that
# ran the response then closes its log with the partial output. `closed` makes that once.
# A late completion after a cancel is refused (and appends nothing). Returns nil or
# {changed, status, obj}.
FINISH_RESPONSE: Final = _LAST_SEQ + _APPEND_PACKED + LEDGER + _RECORD_BYTES + """
local state = redis.call('HMGET', KEYS[1], 'status', 'tenant')
local status, tenant = state[1], state[2]
if not status then return false end
if tenant and tenant ~= ARGV[7] then
  return redis.error_reply('ERR the response belongs to another tenant')
end
local ok = status == 'queued' or status == 'in_progress'
if not ok and status == 'cancelled' and ARGV[1] == 'cancelled' then
  ok = redis.call('HGET', KEYS[1], 'closed') ~= '1'
end
if not ok then
  return {0, status, redis.call('HGET', KEYS[1], 'obj')}
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'obj', ARGV[2], 'closed', '1')
if #ARGV[6] > 0 then
  append_packed(KEYS[3], ARGV[6], 1, #ARGV[6] + 1)
  redis.call('HSET', KEYS[1], 'logged', '1')
  redis.call('EXPIRE', KEYS[3], ARGV[4])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if tenant then
  local sec = ledger_now()
  ledger_set(KEYS[4], KEYS[1], sec, record_bytes(KEYS[1], KEYS[2]), ledger_until(sec, ARGV[3]))
  for i = 5, #KEYS do
    redis.call('SET', KEYS[i], ARGV[5], 'EX', ARGV[3])
  end
end
return {1, ARGV[1], ARGV[2]}
"""

# Remove a response and everything hanging off it, for its owner only; its bytes leave the
# owner's ledger. KEYS: hash, input, log, ledger   ARGV: tenant   Returns 1 if deleted, else 0.
DELETE_RESPONSE: Final = LEDGER + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
ledger_set(KEYS[4], KEYS[1], ledger_now(), 0, 0)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
"""

# -- background jobs ------------------------------------------------------------------------
# KEYS for every job script: the queue stream (keys.JOB_QUEUE, one slot of its own); ARGV[1] is
# the consumer group. Entry fields are `r` (response id) and `s` (spec), as in keys.py.
# XACK answers 0 when the stream or the group is missing; XPENDING fails with NOGROUP, and a
# script that needs it calls it before writing anything, so the caller can create the group and
# run the script again.

# Add a job unless the queue is full: the length check and the add are one step, so concurrent
# enqueues never pass the bound. Finished entries are deleted, so XLEN = queued + running.
# The group is created with the stream (from id 0, so this first entry is delivered): a stream
# lost with a Redis restart comes back with its group and readers never find it missing.
# ARGV: group, limit, response id, spec   Returns 1 if added, 0 if the queue is full.
ENQUEUE_JOB: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('XADD', KEYS[1], '*', 'r', ARGV[3], 's', ARGV[4])
return 1
"""

# Reset the idle time of the entries `consumer` still owns. The ownership check and the claim
# are one step: an entry another worker reclaimed meanwhile (we were presumed dead) stays
# theirs. XCLAIM with min-idle 0 resets the idle time; JUSTID leaves the delivery count alone
# (a heartbeat is not a redelivery).
# ARGV: group, consumer, entry id*   Returns the ids NOT refreshed (no longer ours: lost).
KEEP_ALIVE_JOBS: Final = """
local lost = {}
for i = 3, #ARGV do
  local owned = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #owned == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# Remove entries for good: acknowledged (out of the pending list) and deleted (out of XLEN).
# ARGV: group, entry id*   Returns how many entries were deleted.
FINISH_JOBS: Final = """
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
"""

# Hand a taken job back: a fresh entry at the end of the queue (undelivered, so any worker may
# take it) replaces the old one. Only if the old entry still exists: one that was finished or
# removed meanwhile is not resurrected. The length is unchanged, so the bound needs no check.
# ARGV: group, old entry id, response id, spec   Returns the new entry id, or nil.
REQUEUE_JOB: Final = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 0 then return false end
return redis.call('XADD', KEYS[1], '*', 'r', ARGV[3], 's', ARGV[4])
"""


# -- the response cache -------------------------------------------------------------------------
# Members of a semantic namespace are `<bucket>:<exact key>`; the bucket sets' names are ARGV
# prefix .. bucket (same hash tag as KEYS, so the same slot).

_CACHE_PRUNE: Final = """
local function prune(vectors, order, prefix, members)
  for _, member in ipairs(members) do
    redis.call('ZREM', order, member)
    redis.call('HDEL', vectors, member)
    local bucket = string.match(member, '^(%d+):')
    if bucket then redis.call('SREM', prefix .. bucket, member) end
  end
end
"""

# Add one vector to a namespace, keeping it bounded: drop what has expired, add, then drop the
# oldest past `limit`. Every key touched gets the entries' TTL again.
# KEYS: vectors, order
# ARGV: member, value (guard \0 vector), expiry (unix s), now (unix s), limit, ttl, prefix, bucket
CACHE_ADD_VECTOR: Final = _CACHE_PRUNE + """
local prefix = ARGV[7]
prune(KEYS[1], KEYS[2], prefix, redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[4]))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('SADD', prefix .. ARGV[8], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  prune(KEYS[1], KEYS[2], prefix, redis.call('ZRANGE', KEYS[2], 0, over - 1))
end
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
redis.call('EXPIRE', prefix .. ARGV[8], ARGV[6])
return 1
"""

# The live members of the probed buckets with their values, in one round trip.
# KEYS: vectors, order
# ARGV: now (unix s), prefix, bucket*
# Returns a flat list: member, value, member, value, ...
CACHE_CANDIDATES: Final = """
local sets = {}
for i = 3, #ARGV do sets[#sets + 1] = ARGV[2] .. ARGV[i] end
local members = redis.call('SUNION', (table.unpack or unpack)(sets))
local out = {}
local now = tonumber(ARGV[1])
for _, member in ipairs(members) do
  local expiry = redis.call('ZSCORE', KEYS[2], member)
  if expiry and tonumber(expiry) > now then
    local value = redis.call('HGET', KEYS[1], member)
    if value then
      out[#out + 1] = member
      out[#out + 1] = value
    end
  end
end
return out
"""

# -- foreground leases (keys.LEASES; services/eventlog/ownership.py)
# ------------------------------------- These touch only the lease set (one slot). Deadlines are in
# milliseconds of the server's own clock (`_NOW_MS`), so instances with drifting clocks agree on
# what has expired. A stored foreground response's lease is taken by CREATE_RESPONSE; these renew,
# list and drop it.

# One writer's leases in one call: new ones taken, held ones renewed, finished ones dropped.
# A held lease whose deadline already passed is NOT renewed: someone may be closing that
# response (its writer was presumed dead); the writer must stop it instead.
# A finished one is dropped only if its response is terminal (or gone) here: after a Redis
# failover the primary may have lost the final write its writer saw acknowledged (replication
# is asynchronous), and the drop then reaches the promoted replica where the response is still
# `in_progress`; its lease is left to expire instead, so a sweep closes it (issue 26). The
# response hash is declared (KEYS), so a sharded layout keeps it with its lease.
# KEYS: the lease set, then the dropped ids' response hashes, in order
# ARGV: ttl_ms, count of new ids, new id*, count of held ids, held id*, dropped id*
# Returns the held ids that were lost (expired or gone).
RENEW_LEASES: Final = _TERMINAL + _NOW_MS + """
local deadline = now + tonumber(ARGV[1])
local n_new = tonumber(ARGV[2])
local i = 3
for _ = 1, n_new do
  redis.call('ZADD', KEYS[1], deadline, ARGV[i])
  i = i + 1
end
local n_held = tonumber(ARGV[i])
i = i + 1
local lost = {}
for _ = 1, n_held do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) >= now then
    redis.call('ZADD', KEYS[1], deadline, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
  i = i + 1
end
for j = i, #ARGV do
  local status = redis.call('HGET', KEYS[2 + j - i], 'status')
  if not status or TERMINAL[status] then
    redis.call('ZREM', KEYS[1], ARGV[j])
  end
end
return lost
"""

# ARGV: limit   Returns up to `limit` ids whose lease deadline has passed, oldest first.
EXPIRED_LEASES: Final = _NOW_MS + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))
"""

# ARGV: response id   Returns 1 (expired), 0 (held), -1 (no lease).
LEASE_STATE: Final = _NOW_MS + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return -1 end
if tonumber(score) < now then return 1 end
return 0
"""
