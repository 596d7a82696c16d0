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

from proxy.store.budget.ledger import LEDGER
from proxy.store.keys import JOB_WAKE_MAX

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

# `append_from(log, blob, pos, stop, last)`: XADD the log entries packed into bytes `pos` to
# `stop - 1` of one argument (store/lua/packing.py: `<first> 4 <last> 4 <earlier records> 4
# <last type> 4 <last JSON>`, entries joined by byte 3), each with id `1-<its last seq>`, fields
# t and d (its last event, as the earlier release's one-event entries) and e (the events
# before it, when there are any), skipping the events whose seq is not above `last` (the log's
# newest), so a retried write adds nothing twice: a whole entry at once, or, for an entry that
# partly landed before, its first records (skipped by counting separators). One XADD and a few
# searches per entry, however many events it holds; the parts are ranges of the argument.
# Returns the events added, how many of those went beyond one per entry in field e and in field
# c (the hash's `extra` and `more`, which `log_extent` adds to XLEN to count events, keys.py),
# and the new newest seq. An entry's earlier records (packing.py `records`) are written as
# they came, cut only of their leading records when some already landed (counted by their
# separators, byte 1; a compact run's template, after the records, stays).
# `earlier_field(records)`: the field they go to (and so the count they add to): c and `more`
# when some are compact, else e and `extra`, as releases before c405424 wrote them (they read
# those; a compact run is a gap to them, keys.py F_MORE). Told by the last byte alone: compact
# records end with their run's template, whose item part ends `"delta":` (a colon, byte 58),
# records in full with a JSON object's closing brace.
# `marks` (the final write's, else nil): {h = field h of the blob's first entry or nil, f = field
# f of its last entry or nil}, the events held by reference (keys.py, "the event log's
# references"); each is written only on the entry it belongs to (skipped with it).
_EARLIER_FIELD: Final = """
local function earlier_field(records)
  if string.byte(records, -1) == 58 then return 'c' end
  return 'e'
end
"""
_APPEND_ENTRIES: Final = _EARLIER_FIELD + """
local function xadd_marked(log, id, kind, data, field, earlier, h, f)
  local fields = {'t', kind, 'd', data}
  if earlier then fields[#fields + 1] = field; fields[#fields + 1] = earlier end
  if h then fields[#fields + 1] = 'h'; fields[#fields + 1] = h end
  if f then fields[#fields + 1] = 'f'; fields[#fields + 1] = f end
  redis.call('XADD', log, id, unpack(fields))
end

local function append_from(log, blob, pos, stop, last, marks)
  local added, extra, more = 0, 0, 0
  local start = pos
  while pos < stop do
    local finish = string.find(blob, '\3', pos, true)
    if not finish or finish > stop then finish = stop end
    local a = string.find(blob, '\4', pos, true)
    local b = string.find(blob, '\4', a + 1, true)
    local c = string.find(blob, '\4', b + 1, true)
    local d = string.find(blob, '\4', c + 1, true)
    local first = tonumber(string.sub(blob, pos, a - 1))
    local top = tonumber(string.sub(blob, a + 1, b - 1))
    if top > last then
      local kind, data = string.sub(blob, c + 1, d - 1), string.sub(blob, d + 1, finish - 1)
      if first > last then last = first - 1 end
      -- the records not yet in the log (those before `last` landed already), their field
      local earlier, field = nil, nil
      if last < top - 1 then
        local from = b + 1
        for _ = first, last do from = string.find(blob, '\1', from, true) + 1 end
        earlier = string.sub(blob, from, c - 1)
        field = earlier_field(earlier)
        if field == 'c' then more = more + top - last - 1 else extra = extra + top - last - 1 end
      end
      if marks then
        local f = finish >= stop and marks.f
        xadd_marked(log, '1-' .. top, kind, data, field, earlier, pos == start and marks.h, f)
        if f then marks.done = true end
      elseif earlier then  -- (no Lua table and `unpack` when there are no marks)
        redis.call('XADD', log, '1-' .. top, 't', kind, 'd', data, field, earlier)
      else
        redis.call('XADD', log, '1-' .. top, 't', kind, 'd', data)
      end
      added = added + top - last
      last = top
    end
    pos = finish + 1
  end
  return added, extra, more, last
end

-- One argument of packed entries to a log that may hold some of them (create, final write):
-- the hash's `extra` and `more` count what the new entries hold beyond one event each
-- (`append_from`), `extra` also a terminal event held by reference (`marks.f`).
-- `last`: the hash's `last` field when the caller read it
-- (APPEND_EVENTS_MANY's, see there), else the log is read. Returns the events added and the
-- log's newest inline seq.
local function append_packed(hash, log, blob, last, marks)
  local added, extra, more, top = append_from(log, blob, 1, #blob + 1, last or last_seq(log),
                                             marks)
  if marks and marks.done then extra = extra + 1 end
  if extra > 0 then redis.call('HINCRBY', hash, 'extra', extra) end
  if more > 0 then redis.call('HINCRBY', hash, 'more', more) end
  return added, top
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
# ARGV: the numbers '<ttl> <event_ttl> <lease ms> <budget> <logged><closed>' (lease '0': take
#       no lease; budget in bytes, '0': none; logged and closed '0' or '1'), status, tenant,
#       obj, parents, input, replica, response id, index location [, packed events]
# The numbers travel as one argument: the proxy's Redis client formats each argument's length
# with a `sprintf` (~0.7k instructions), and a create has some twenty; five fewer per create.
# Returns {1, bytes held before, bytes counted for this response}; or {0, bytes held} with
# nothing written when the key already holds its budget (the check and the count are one
# step: two instances cannot both take the last bytes).
# Fields are overwritten, not merged: a retried create writes the same values again, and its
# events are skipped as duplicates. Writing events marks the response as logged.
# The index entries, the ledger and the lease are the response's shard tag's (one slot with
# it, keys.py): written here, they cost no pipeline of redis-py's (about 0.1 ms of the proxy's
# CPU per call) nor, for the lease, a round trip of its own before the first event.
# The lease's deadline is on the server's clock, as RENEW_LEASES sets it. It is taken last, so
# a create that failed (an error ends a script where it happens) leaves no lease behind.
CREATE_RESPONSE: Final = _LAST_SEQ + _APPEND_ENTRIES + LEDGER + """
local ttl, event_ttl, lease, budget, logged, closed =
  string.match(ARGV[1], '^(%d+) (%d+) (%d+) (%-?%d+) ([01])([01])$')
if not ttl then return redis.error_reply('ERR malformed create numbers') end
local clock = redis.call('TIME')  -- read once: the ledger's seconds and the lease's deadline
local sec = tonumber(clock[1])
local held = ledger_held(KEYS[5], sec)
budget = tonumber(budget)
if budget > 0 and held >= budget then return {0, held} end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'tenant', ARGV[3], 'obj', ARGV[4],
           'parents', ARGV[5], 'logged', logged, 'closed', closed, 'replica', ARGV[7])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[6], 'EX', ttl)
-- `record_bytes` of what was just written, from the arguments (three reads fewer)
local size = #ARGV[4] + #ARGV[5] + #ARGV[6]
ledger_set(KEYS[5], KEYS[1], sec, size, ledger_until(sec, ttl))
if #ARGV >= 10 then
  append_packed(KEYS[1], KEYS[3], ARGV[10])
  redis.call('HSET', KEYS[1], 'logged', '1')
  redis.call('EXPIRE', KEYS[3], event_ttl)
end
for i = 6, #KEYS do
  redis.call('SET', KEYS[i], ARGV[9], 'EX', ttl, 'NX')
end
if lease ~= '0' then
  local now = sec * 1000 + math.floor(tonumber(clock[2]) / 1000)  -- as `_NOW_MS`
  redis.call('ZADD', KEYS[4], now + tonumber(lease), ARGV[8])
end
return {1, held, size}
"""

# Append events to one response's log (one call per response, all pipelined together).
# KEYS: hash, log
# ARGV: event_ttl, packed entries (store/lua/packing.py, `append_from`)
# Dropped whole: events of an unknown response (deleted, expired, never created: every read
# goes through the record's tenant check, so such a log could never be read, and writing it
# would resurrect a deleted response's log until its TTL), and events after `closed` (the
# terminal event is the last one a reader will ever see).
APPEND_EVENTS: Final = _LAST_SEQ + _APPEND_ENTRIES + """
local state = redis.call('HMGET', KEYS[1], 'tenant', 'logged', 'closed')
if not state[1] or state[3] == '1' then return 0 end
local added = append_packed(KEYS[1], KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[1])
if added > 0 then
  -- `last` is APPEND_EVENTS_MANY's (it trusts the field once set): kept right here too
  redis.call('HSET', KEYS[1], 'logged', '1', 'last', last_seq(KEYS[2]))
end
return added
"""

# Append the events of every live stream of this process: one call per flush, whatever the
# number of streams (the flusher's hot path, services/eventlog/writer.py). Per stream it does what
# APPEND_EVENTS does, with the same rules (unknown or closed responses dropped whole).
# Why one call and not one per stream: at 256 streams with tokens 20 ms apart every flush
# carries about one event per stream, so one script per stream meant one EVALSHA, its argument
# parsing and its Lua call set-up per token, in redis-server and in redis-py (measured in
# docs/benchmarks-history.md, "Event-log appends").
# Why each entry's parts as arguments of their own, not one packed argument cut by string
# searches (what CREATE_RESPONSE and FINISH_RESPONSE take): Redis hashes every byte of every
# string a script makes (its Lua is patched so), so an argument cut into the entry's fields made
# each event's bytes be hashed twice, and that hashing was the larger part of this script's own
# time once entries held a dozen events; an argument is hashed once and goes to XADD as it is.
# KEYS: on a Redis Cluster, every key the call writes, each stream's hash and log: the caller
#   makes one call per shard tag (core/shardtags.py), all of whose keys share one slot, and a
#   slot being moved is judged by the declared keys alone (see the conventions above). One
#   primary declares none. Either way the keys the script writes travel in the arguments,
#   `rp:...` and `rp:...:log` (keys.py, checked by tests/contract/test_store_contract.py).
# ARGV: event_ttl, then per stream: its response hash key, its number of entries n, and n times
#   an entry's first seq, last seq, earlier records (`<type> 0x00 <JSON>` joined by byte 1, ''
#   for none), last type, last JSON (store/lua/packing.py `stream_args`). Made by the proxy.
# Returns the hash keys, among the streams written, of the responses someone on another
# instance follows live (the hash's `followed`, set by MARK_FOLLOWED): the writer then stops
# holding their events back (services/eventlog/writer.py). Read in the HMGET the call makes
# anyway: no command more.
APPEND_EVENTS_MANY: Final = _LAST_SEQ + _EARLIER_FIELD + """
local size = #ARGV
local i = 2
local followed = {}
while i <= size do
  local hash = ARGV[i]
  local from = i + 2
  i = from + 5 * tonumber(ARGV[i + 1])
  local state = redis.call('HMGET', hash, 'tenant', 'closed', 'last', 'extra', 'followed',
                           'more')
  if state[1] and state[2] ~= '1' then
    if state[5] then followed[#followed + 1] = hash end
    local log = hash .. ':log'
    -- `last`: the log's newest sequence number as of this script's previous call, which
    -- spares an XREVRANGE per stream and flush. Only this script keeps it; the others that
    -- append (create, finish) do so before it first runs or close the log, so a missing
    -- field (first flush) falls back to reading the log itself.
    local last = tonumber(state[3]) or last_seq(log)
    local added, extra, more = 0, 0, 0
    for j = from, i - 1, 5 do
      -- as `append_from`: events not above `last` skipped (a retried write adds nothing
      -- twice), a whole entry at once or, for one that partly landed, its first records
      local first, top = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
      if top > last then
        if first > last then last = first - 1 end
        if last >= top - 1 then
          redis.call('XADD', log, '1-' .. top, 't', ARGV[j + 3], 'd', ARGV[j + 4])
        else
          local records = ARGV[j + 2]
          if last >= first then
            local at = 1
            for _ = first, last do at = string.find(records, '\1', at, true) + 1 end
            records = string.sub(records, at)
          end
          local field = earlier_field(records)
          redis.call('XADD', log, '1-' .. top, 't', ARGV[j + 3], 'd', ARGV[j + 4],
                     field, records)
          if field == 'c' then more = more + top - last - 1 else extra = extra + top - last - 1 end
        end
        added = added + top - last
        last = top
      end
    end
    if added > 0 then
      -- (a branch each: no Lua table and `unpack` per stream and flush)
      if more > 0 and extra > 0 then
        redis.call('HSET', hash, 'logged', '1', 'last', last, 'more',
                   (tonumber(state[6]) or 0) + more, 'extra', (tonumber(state[4]) or 0) + extra)
      elseif more > 0 then
        redis.call('HSET', hash, 'logged', '1', 'last', last, 'more',
                   (tonumber(state[6]) or 0) + more)
      elseif extra > 0 then
        redis.call('HSET', hash, 'logged', '1', 'last', last, 'extra',
                   (tonumber(state[4]) or 0) + extra)
      else
        redis.call('HSET', hash, 'logged', '1', 'last', last)
      end
      redis.call('EXPIRE', log, ARGV[1])
    end
  end
end
return followed
"""

# Mark a response's log as followed live from another instance (services/eventlog/follow.py):
# its writer, wherever it runs, learns it from its next flush's reply (APPEND_EVENTS_MANY) and
# from then on writes the stream's events every window instead of holding them back for a
# longer entry. Only on an existing record (HSET on a missing key would make a record with no
# TTL); never cleared: the stream ends soon enough, and the record goes with its TTL. Two
# deliberate departures from the conventions above, the mark being no content of the record
# (only how often its writer flushes): its TTL is left as it is (renewing it would move the
# record's bytes in its tenant's ledger, which TRANSITION does), and no tenant is checked (the
# follower's own read of the record checked it).
# KEYS: hash
# Returns 1 when marked, 0 for an unknown response.
MARK_FOLLOWED: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'followed', '1')
return 1
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
#       tenant, obj's length ('0': none), head, final, create-time object's length
# With the obj's length, obj is '' and the object is the terminal event's `response`, the last
# bytes of the packed events but their closing brace (store/redis.py `_final_object`): sent once,
# not twice (it is most of the final write's bytes), and never parsed here.
# `head` and `final` ('' for none): the events the proxy found byte-identical to a reference
# (keys.py, "the event log's references"), left out of the packed events: the types of the
# first two, written as field h of the first entry, and the terminal's (`obj`'s), field f of
# the last. The head refers to the create-time object: the record's `obj` until this write,
# kept as `first` (its length checked against the one the proxy compared: a record rewritten
# since, which no foreground path does, is an error, nothing written). A log already begun (a
# flush landed though its reply was lost) holds its head inline: no h then. A last entry
# already in the log (the same) gets the terminal inline, made here.
# The events are packed as the create's are (log entries in one argument, store/lua/packing.py
# `packed`), in order. Carrying the stream's pending events here spares a short stream
# its own flush before the end (services/eventlog/writer.py). An event whose seq is not above the
# log's last is skipped, so a retried call (the first one landed, its reply lost) adds nothing:
# it is refused anyway, the log being closed.
# Accepted from queued / in_progress; and once from a `cancelled` whose log is still open when
# the final object is `cancelled` too: the cancel endpoint only flips the status, the worker that
# ran the response then closes its log with the partial output. `closed` makes that once.
# A late completion after a cancel is refused (and appends nothing). Returns nil, {0, status,
# stored obj} when refused, or {1, status} (the caller has the object it wrote).
FINISH_RESPONSE: Final = _LAST_SEQ + _APPEND_ENTRIES + LEDGER + """
-- Read at once: what the append and the ledger would each read again (two commands fewer),
-- and the create-time object when the head may refer to it.
local state
if ARGV[9] ~= '' then
  state = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'last', 'bytes', 'until', 'obj')
else
  state = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'last', 'bytes', 'until')
end
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
local obj, blob = ARGV[2], ARGV[6]
local length = tonumber(ARGV[8])
if length > 0 then obj = string.sub(blob, #blob - length, #blob - 1) end
if #blob > 0 then
  local last = tonumber(state[3]) or last_seq(KEYS[3])
  local marks = nil
  if ARGV[9] ~= '' or ARGV[10] ~= '' then
    marks = {}
    if ARGV[9] ~= '' and last < 0 then marks.h = ARGV[9] end
    if ARGV[10] ~= '' then marks.f = ARGV[10] end
  end
  if marks and marks.h then
    local first = state[6]
    if #first ~= tonumber(ARGV[11]) then
      return redis.error_reply('ERR the create-time object was rewritten')
    end
    local _, seps = string.gsub(marks.h, '\1', '')
    redis.call('HSET', KEYS[1], 'status', ARGV[1], 'obj', obj, 'closed', '1', 'logged', '1',
               'first', first, 'head', seps + 1)
  else
    redis.call('HSET', KEYS[1], 'status', ARGV[1], 'obj', obj, 'closed', '1', 'logged', '1')
  end
  local _, top = append_packed(KEYS[1], KEYS[3], blob, last, marks)
  if marks and marks.f and not marks.done then
    redis.call('XADD', KEYS[3], '1-' .. (top + 1), 't', marks.f, 'd', '{"type":"' .. marks.f
               .. '","sequence_number":' .. (top + 1) .. ',"response":' .. obj .. '}')
  end
  redis.call('EXPIRE', KEYS[3], ARGV[4])
else
  redis.call('HSET', KEYS[1], 'status', ARGV[1], 'obj', obj, 'closed', '1')
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if tenant then
  local sec = ledger_now()
  -- `record_bytes`, the object's length taken from what was just written
  local size = #obj + redis.call('HSTRLEN', KEYS[1], 'parents') + redis.call('STRLEN', KEYS[2])
  ledger_set(KEYS[4], KEYS[1], sec, size, ledger_until(sec, ARGV[3]), {state[4], state[5]})
  for i = 5, #KEYS do
    redis.call('SET', KEYS[i], ARGV[5], 'EX', ARGV[3])
  end
end
return {1, ARGV[1]}
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
# KEYS for every job script but KEEP_ALIVE_JOBS: keys.JOB_KEYS, in that order (the stream, the
# queued jobs, the keys' sub-queue bounds, the new and old ready lists, the running ids, the
# wake-up list), all in the `{queue}` slot and all declared. The layout is store/jobqueue.py's.
# Stream entry fields are `r` (response id), `s` (spec) and `k` (the tenant it counts for;
# absent on an entry an older release queued), as in keys.py. A queued job is its response id,
# byte 0, its spec (no response id holds byte 0).
# XACK answers 0 when the stream or the group is missing; XPENDING fails with NOGROUP, and a
# script that needs it calls it before writing anything, so the caller can create the group and
# run the script again.

_JOBS_COMMON: Final = """
local ZERO = string.char(0)

local function entry_fields(id)
  local found = redis.call('XRANGE', KEYS[1], id, id)
  if #found == 0 then return nil end
  local flat, fields = found[1][2], {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  return fields
end

local function keep_running(owner, ids)
  if ids == ' ' then
    redis.call('HDEL', KEYS[6], owner)
  else
    redis.call('HSET', KEYS[6], owner, ids)
  end
end

-- How many jobs of `owner` run. `check`: only count the ids still in the stream, and forget
-- the others (an entry removed by anything but these scripts: an older release's worker
-- finishing a job it reclaimed, a stream lost with a restart), so a key's share heals.
local function running(owner, check)
  local ids = redis.call('HGET', KEYS[6], owner)
  if not ids then return 0 end
  local n, kept = 0, ' '
  for id in string.gmatch(ids, '%S+') do
    if not check or #redis.call('XRANGE', KEYS[1], id, id) > 0 then
      n = n + 1
      kept = kept .. id .. ' '
    end
  end
  if check then keep_running(owner, kept) end
  return n
end

local function forget_running(owner, id)
  local ids = redis.call('HGET', KEYS[6], owner)
  if not ids then return end
  local at = string.find(ids, ' ' .. id .. ' ', 1, true)
  if not at then return end
  keep_running(owner, string.sub(ids, 1, at) .. string.sub(ids, at + #id + 2))
end

local function bounds(owner)
  return tonumber(redis.call('HGET', KEYS[3], owner .. ':h') or '0'),
         tonumber(redis.call('HGET', KEYS[3], owner .. ':t') or '0')
end

local function wake()
  redis.call('RPUSH', KEYS[7], 1)
  redis.call('LTRIM', KEYS[7], -tonumber(ARGV_WAKE_MAX), -1)
end
"""


def _jobs_script(body: str) -> str:
    return _JOBS_COMMON.replace("ARGV_WAKE_MAX", str(JOB_WAKE_MAX)) + body


# Queue jobs for one key, all or none: refused when the whole queue (queued + running) would
# pass `total`, or the key's own jobs (queued + running) its `limit`. The key's running ids are
# checked against the stream before a refusal (never on the fast path), so a count left behind
# by an entry removed elsewhere cannot shut a key out. A key that had nothing queued joins the
# end of the new list (served before the keys already served, in arrival order).
# ARGV: owner, limit, total, then (response id, spec) pairs.
# Returns 1 queued; 0 the key's share is full; -1 the queue is full.
ENQUEUE_JOBS: Final = _jobs_script("""
local owner, limit, total = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
if redis.call('HLEN', KEYS[2]) + redis.call('XLEN', KEYS[1]) + n > total then return -1 end
local head, tail = bounds(owner)
if tail - head + running(owner, false) + n > limit
   and tail - head + running(owner, true) + n > limit then
  return 0
end
if tail == head then redis.call('RPUSH', KEYS[4], owner) end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], owner .. ' ' .. tail, ARGV[i] .. ZERO .. ARGV[i + 1])
  tail = tail + 1
end
redis.call('HSET', KEYS[3], owner .. ':h', head, owner .. ':t', tail)
wake()
return 1
""")

# What one key may still queue: what is left of its share (its running ids checked against the
# stream, as ENQUEUE_JOBS does before refusing), and of the whole queue.
# ARGV: owner, limit, total   Returns {the key's room, the queue's room} (0 or less: none).
ROOM_FOR_JOBS: Final = _jobs_script("""
local owner, limit, total = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local head, tail = bounds(owner)
return {limit - (tail - head) - running(owner, true),
        total - redis.call('HLEN', KEYS[2]) - redis.call('XLEN', KEYS[1])}
""")

# Deliver up to `count` jobs to `consumer`: first entries already in the stream that no one was
# handed (an older release queued them there: FIFO, as it would have), then, one key at a time,
# the oldest job of the next ready key (the new list first, then the old one round robin): it
# becomes a stream entry and is delivered by XREADGROUP in this same script, so no other reader
# can take it between the two, and the stream holds running jobs only. A served key with more
# queued goes to the end of the old list; one with none leaves both lists.
# The first read creates a missing stream or group (from id 0: entries added before it are
# delivered), before anything is written.
# fakeredis's Lua (lupa) answers XREADGROUP with {stream, entries}, Redis with
# {{stream, entries}} (false for nothing): `delivered` reads both.
# ARGV: group, consumer, count   Returns the delivered entries: {id, {field, value...}}...
TAKE_JOBS: Final = _jobs_script("""
local group, consumer, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local function read(n)
  return redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n, 'STREAMS', KEYS[1], '>')
end
local function delivered(reply)
  if type(reply) ~= 'table' or #reply == 0 then return {} end
  if type(reply[1]) == 'table' then return reply[1][2] end
  return reply[2] or {}
end
local first = read(count)
if type(first) == 'table' and first.err then
  -- Only a missing stream or group is ours to mend (Redis: NOGROUP; fakeredis: the XGROUP
  -- message); any other failure is answered as it is.
  local err = tostring(first.err)  -- lupa hands fakeredis's message over as userdata
  if not (string.find(err, 'NOGROUP', 1, true)
          or string.find(err, 'requires the key to exist', 1, true)) then
    return first
  end
  redis.call('XGROUP', 'CREATE', KEYS[1], group, '0', 'MKSTREAM')
  first = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS',
                     KEYS[1], '>')
end
local got = delivered(first)
local moved = 0
while #got + moved < count do
  local owner = redis.call('LPOP', KEYS[4])
  if not owner then owner = redis.call('LPOP', KEYS[5]) end
  if not owner then break end
  local head, tail = bounds(owner)
  local field = owner .. ' ' .. head
  local job = redis.call('HGET', KEYS[2], field)
  redis.call('HDEL', KEYS[2], field)
  if head + 1 < tail then
    redis.call('HSET', KEYS[3], owner .. ':h', head + 1)
    redis.call('RPUSH', KEYS[5], owner)
  else
    redis.call('HDEL', KEYS[3], owner .. ':h', owner .. ':t')
  end
  if job then
    local cut = string.find(job, ZERO, 1, true)
    local id = redis.call('XADD', KEYS[1], '*', 'r', string.sub(job, 1, cut - 1),
                          's', string.sub(job, cut + 1), 'k', owner)
    redis.call('HSET', KEYS[6], owner, (redis.call('HGET', KEYS[6], owner) or ' ') .. id .. ' ')
    moved = moved + 1
  end
end
if moved > 0 then
  local more = delivered(redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', moved,
                                    'STREAMS', KEYS[1], '>'))
  for _, entry in ipairs(more) do got[#got + 1] = entry end
end
return got
""")

# Reset the idle time of the entries `consumer` still owns. The ownership check and the claim
# are one step: an entry another worker reclaimed meanwhile (we were presumed dead) stays
# theirs. XCLAIM with min-idle 0 resets the idle time; JUSTID leaves the delivery count alone
# (a heartbeat is not a redelivery).
# KEYS: the stream only.  ARGV: group, consumer, entry id*   Returns the ids NOT refreshed (no
# longer ours: lost).
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

# Remove entries for good: no longer running for their key, acknowledged (out of the pending
# list) and deleted (out of XLEN).
# ARGV: group, entry id*   Returns how many entries were deleted.
FINISH_JOBS: Final = _jobs_script("""
for i = 2, #ARGV do
  local fields = entry_fields(ARGV[i])
  if fields and fields['k'] then forget_running(fields['k'], ARGV[i]) end
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
""")

# Hand a taken job back, only if its entry still exists (one finished or removed meanwhile is
# not resurrected). It goes back to the front of its key's sub-queue (it had its turn already;
# a key that had nothing else queued is ready again, first); an older release's entry (no key)
# goes back into the stream as a fresh, undelivered entry, as that release did. The key's count
# is unchanged (one running less, one queued more), so the bound needs no check.
# ARGV: group, old entry id, response id, spec   Returns 1 if handed back, or nil.
REQUEUE_JOB: Final = _jobs_script("""
local fields = entry_fields(ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 0 then return false end
local owner = fields and fields['k']
if not owner then
  redis.call('XADD', KEYS[1], '*', 'r', ARGV[3], 's', ARGV[4])
  wake()
  return 1
end
forget_running(owner, ARGV[2])
local head, tail = bounds(owner)
if head == tail then redis.call('LPUSH', KEYS[4], owner) end
head = head - 1
redis.call('HSET', KEYS[2], owner .. ' ' .. head, ARGV[3] .. ZERO .. ARGV[4])
redis.call('HSET', KEYS[3], owner .. ':h', head, owner .. ':t', tail)
wake()
return 1
""")


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
# `in_progress`; its lease is left to expire instead, so a sweep closes it (the Sentinel
# failover rows found this). The response hash is declared (KEYS), so a sharded layout keeps it
# with its lease.
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
