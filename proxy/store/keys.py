"""Every Redis key the store writes, in one place. Lifetimes are settings (`--response-ttl`,
`--event-ttl`, settings/) that the services pass to every write; none is defaulted here.

Invariants (docs/design.md, "Redis"):
- Every script touches one slot, so the same layout serves one primary, Sentinel and a Redis
  Cluster. How, for the scripts of the hot path that write keys of several objects (the
  event-log flush, scripts.APPEND_EVENTS_MANY, one call for every live stream; the create and
  final write of a response, CREATE_RESPONSE / FINISH_RESPONSE, which also write its item
  index entries, its tenant's storage ledger and, at creation, its lease): the slot is chosen
  on purpose. On a cluster every new response and conversation id carries a shard tag
  (core/shardtags.py: `resp_<tag>_<hex>`, one of 32 fixed tags, one per range of 512 slots),
  and every key of that object *and* every key those scripts write beside it carries the hash
  tag `{<tag>}`: the item index entries, the lease set and the ledger exist once per tag. So
  the create and the final write stay one call, and a flush is one call per tag this instance
  holds live streams in (store/connection/shards.py draws two tags per primary: ~2 calls per
  primary), not one per stream. Any reader derives the slot from the id alone.
- Untagged ids (every id made on one primary or Sentinel, and every id made before Cluster support)
  keep the keys they always had: hash tag `{<response id>}` / `{<conversation id>}`, the untagged
  ledger, index and lease set, which one server holds together. On a cluster an untagged id names
  nothing (store/redis.py answers "not found" without a call).
- What fans out on a cluster, never on the hot path: the lease sweep reads every tag's lease
  set; a key's stored bytes are the untagged ledger (files, prompts) plus its ledger under each
  tag (pipelined per node); an `item_reference` to a client-chosen item id reads its index
  entry under every tag. Calls that span several responses (`load_chain`, `tail`) are
  pipelines or multi-key reads the cluster client splits (or, `tail`, one read per tag).
- Every key is written with a TTL and every write renews the TTL of the keys it touches:
  nothing outlives its owner and nothing grows without bound. One exception, bounded instead
  of expiring: the job queue (see "background jobs" below).
- Nothing here is ever found by pattern: no KEYS, no SCAN. A key is always built from an id.

Layout (`{T}` below: `{<tag>}<id>` for a tagged id, `{<id>}` for an untagged one):

    rp:{T}                  HASH    status | tenant | obj | parents | logged | closed |
                                    replica | last | extra | more | first | head | bytes |
                                    until
    rp:{T}:in               STRING  the request's input items, one JSON array
    rp:{T}:log              STREAM  entries `1-<sequence_number>` with fields t (type), d (JSON)
                                    of that event and, for a run of events, e: the ones before
                                    it, `<type> 0x00 <JSON>` joined by 0x01, or c: the same with
                                    a run of deltas compact (store/lua/packing.py); h / f:
                                    events held as references to the hash's `first` / `obj`
                                    (below, "the event log's references")
    rp:{T}:reaper           STRING  who closes the response whose lease expired
    ix:{tenant:item_id}     STRING  where one key's stored item lives: `o:<resp_id>` (in its
                                    output) or `i:<resp_id>` (in its input items), for
                                    `item_reference` (untagged responses)
    ix:{tag}:tenant:item_id STRING  the same, for a response of shard tag `tag`
    cv:{T}                  HASH    tenant | obj | meta | next
    cv:{T}:order            ZSET    item id scored by its insertion number
    cv:{T}:items            HASH    item id -> item JSON
    lim:{tenant}:stored     HASH    a key's stored bytes by the time they stop counting (the
                                    storage ledger, ledger.py): files, prompts, untagged objects
    lim:{tag}:tenant:stored HASH    the same for the key's objects of shard tag `tag`
    leases:{live}           ZSET    leases of untagged foreground responses
    leases:{tag}            ZSET    leases of shard tag `tag`'s foreground responses
    jobs:{queue}            STREAM  one entry per running background job: r (response id),
                                    s (spec), k (its key); consumer group `workers` (one slot
                                    on a cluster, with the four keys below)
    jobs:{queue}:jobs       HASH    `<key> <n>` -> a queued job (response id, byte 0, spec)
    jobs:{queue}:owners     HASH    `<key>:h` / `<key>:t` -> the key's next job to take / to add
    jobs:{queue}:new        LIST    keys with queued jobs not served since they had none
    jobs:{queue}:old        LIST    keys with queued jobs served at least once: a ring
    jobs:{queue}:run        HASH    key -> the stream ids of its running jobs (" id id ")
    jobs:{queue}:wake       LIST    wake-up tokens for waiting workers (at most 64)
    jobs:cancel             (pub/sub channel, not a key) ids of cancelled responses
    fleet:secret            STRING  the deployment's random fleet secret (no --fleet-secret)
    fl:{tenant}:<file id>   HASH    obj | n (chunks) | bytes | until: an uploaded file's object
                                    (files.py); written last, so a file is seen only whole
    fl:{tenant}:<file id>:c HASH    chunk number -> at most 512 KiB of the file's bytes
    fl:{tenant}:list        ZSET    the key's file ids scored by created_at (GET /v1/files)
    pm:{tenant}:<prompt id> HASH    version number -> the prompt object (JSON), and `latest`
    pm:{tenant}:list        ZSET    the key's prompt ids scored by created_at
    vs:{tenant}:<vs id>     HASH    obj | ver | chunks: a vector store's record (vectors.py),
                                    its search version, its chunk count
    vs:{tenant}:<vs id>:f   HASH    file id -> the vector store file object (status ...)
    vs:{tenant}:<vs id>:b   HASH    batch id -> the file batch's record (its file ids)
    vs:{tenant}:<vs id>:v:<file id>
                            HASH    v (float32 vectors) | t (chunk texts) | m (file meta) |
                                    n (chunks): one ingested file's chunks
    vs:{tenant}:list        ZSET    the key's vector store ids scored by created_at
    lim:{tenant}:minute|used|streams, ce:..., cn:{tenant:ns}:...: limits and cache, below (one
                                    slot per script already: tagged by key or namespace)
"""

from __future__ import annotations

from typing import Final

from proxy.core.shardtags import tag_of

# -- responses ------------------------------------------------------------------------------
# Hash field names. The Lua scripts (scripts.py) spell the same names: change both together.

# Status sits in its own field (not inside `obj`) so the compare-and-set scripts read and write
# it without decoding JSON in Lua; readers overlay it onto the object.
F_STATUS: Final = "status"
# Owner of the response: a read by any other tenant behaves as if the key did not exist.
F_TENANT: Final = "tenant"
# The response object as orjson bytes; never decoded in Lua (cjson would renumber floats and
# turn empty arrays into objects).
F_OBJECT: Final = "obj"
# `previous_response_id` ancestors, oldest first, as a JSON array: lets `load_chain` fetch the
# whole chain in one round trip instead of walking it one hop at a time.
F_PARENTS: Final = "parents"
# The URL of the replica chosen to run it ("" when unknown): its follow-ups go there too, so
# vLLM's prefix cache of the chain is reused, whichever instance serves the next turn. Written
# with the create (no extra round trip), read by `load_chain` with the target.
F_REPLICA: Final = "replica"
# "1" once an event log exists for the response (streamed or background).
F_LOGGED: Final = "logged"
# "1" once `finish_response` stored the final object: the log will receive nothing more.
F_CLOSED: Final = "closed"
# The log's events beyond one per entry (absent: none): XLEN + this is how many events it holds,
# which tells a whole log from one with a gap (`log_extent`). Entries of an earlier release
# hold one event each and count in XLEN alone, so a log that mixes both counts right. It also
# counts the terminal event an entry holds by reference (`E_FINAL`), not the head's (`F_HEAD`).
F_EXTRA: Final = "extra"
# The same count for the entries with field c (`E_EARLIER`, a run of deltas compact): kept apart
# from `extra` so that a release before c405424, which reads field e and not c, finds its count
# (XLEN + extra) short of the log's last seq + 1 and rebuilds a finished response's replay from the
# final object instead of sending one with events missing. `log_extent` adds both. A live
# follower of that release misses a compact run's deltas, and its ending of a response whose
# writer died (restored from the log) would lose them: with such an instance beside this one,
# or to roll back to one, `--event-log-format full` writes none (settings/groups.py).
F_MORE: Final = "more"
# "1" once someone on another instance than the writer's followed the log live (scripts.py
# MARK_FOLLOWED): the writer then writes the stream's events every flush window rather than
# holding them back for longer log entries (services/eventlog/writer.py). Absent: nobody did.
F_FOLLOWED: Final = "followed"
# The event log's references. A stored stream's object travelled and was kept several times:
# as the record, inside `response.created` and `response.in_progress` (the create-time object),
# and inside the terminal event (the final object, also the record's `obj`): most of a short
# answer's bytes sent to Redis and of its memory there. So an event whose JSON is exactly
# `{"type":<t>,"sequence_number":<n>,"response":<object>}` with the object byte-identical to one
# the record keeps (compared by the writer at write time) is kept as a reference to it:
# - `first`: the create-time object, which the record's `obj` holds until the final write
#   replaces it: that write keeps it here when the log refers to it (moved inside Redis, not
#   sent again; at the create it would cost every stream's create a copy, on a burst's path,
#   for the streams whose head a flush writes inline anyway).
# - entry field `E_HEAD` (h) on the log's first entry: the types of the response's first two
#   events (`response.created`, `response.in_progress`, seq 0 and 1), joined by 0x01, held as
#   references to `first`; the entry's own events follow them. Always the two or none (see
#   below). `head` in the hash: how many (2), so `log_extent` counts them.
# - entry field `E_FINAL` (f) on the log's last entry: the type of the terminal event, held as
#   a reference to `obj`, numbered one above the entry's id (its last inline event): the final
#   write puts it on the entry of the events it carries (it makes no reference when it carries
#   none: the terminal is then inline). `obj` never changes once final, so the reference holds.
#   A reader of this release reads from the entry whose id is `after` itself (it may hold
#   after + 1 by reference); a live tail (XREAD) reads past it, its position having come from
#   that very entry or, on the writing instance, with the terminal event (writer.py).
# A reader of the earlier release (7423023) reads t, d and e only: it never sends a reference
# as an event, it sees a gap. Its count (XLEN + extra) falls short by the head's two or, with no
# head, exceeds the log's last inline event by the terminal's one; with both, short by one: never
# equal to the last inline seq + 1 (which a head of one event with a terminal would make it),
# so it rebuilds a finished response's replay from the final object
# (services/responses/stored.py), and a live follower of it, finding no terminal event in the
# log, reads the record after `streams.follow_idle` and ends with the terminal event rebuilt
# from the final object.
F_FIRST: Final = "first"
F_HEAD: Final = "head"
E_HEAD: Final = b"h"
E_FINAL: Final = b"f"
# An entry's events before its last (packing.py `records`): c when a run of deltas among them
# is compact, else e, all in full, as releases before c405424 wrote them (and read: e alone).
E_EARLIER: Final = b"c"
E_EARLIER_FULL: Final = b"e"


def _slotted(object_id: str) -> str:
    """`{<tag>}<id>` for an id with a shard tag (core/shardtags.py), else `{<id>}` (today's
    keys, unchanged for every id made before tags or on one primary)."""
    tag = tag_of(object_id)
    return f"{{{tag}}}{object_id}" if tag is not None else f"{{{object_id}}}"


def response(response_id: str) -> str:
    """The response's hash (the record the status compare-and-set works on)."""
    return f"rp:{_slotted(response_id)}"


def response_input(response_id: str) -> str:
    """The input items, written once at creation: a plain string is the cheapest read for
    `input_items` and `load_chain`, and the caller bounds its size."""
    return f"rp:{_slotted(response_id)}:in"


def response_log(response_id: str) -> str:
    """The event log: a stream whose entry ids are `1-<sequence_number of the entry's last
    inline event>`, so Redis itself refuses an out-of-order or duplicated entry, and
    `starting_after=N` is a plain XRANGE from `1-N`: the entry `1-N` holds N + 1 only when that
    is the terminal event by reference (F_FIRST's note), the next one holds N + 1 otherwise (it
    may start at or before N: the reader skips those events). Several events per entry: one
    XADD per stream and flush, not one per token (store/lua/packing.py)."""
    return f"rp:{_slotted(response_id)}:log"


def response_keys(response_id: str, tag: str | None) -> list[str]:
    """`response`, `response_input` and `response_log` of a response whose shard tag is `tag`
    (`tag_of(response_id)`, which the caller has), the slot worked out once: the three
    functions read the tag from the id each (a response's create and its final write)."""
    hashed = f"rp:{{{tag}}}{response_id}" if tag is not None else f"rp:{{{response_id}}}"
    return [hashed, f"{hashed}:in", f"{hashed}:log"]


def log_entry_id(seq: int) -> str:
    # The millisecond part is fixed at 1 because `0-0` is not a valid stream id; the sequence
    # part then carries the event's sequence_number unchanged (0 included).
    return f"1-{seq}"


# -- the item index (`item_reference` inputs) -----------------------------------------------
# Where each stored item lives, so a reference resolves in two pipelined reads whatever the
# number of references (this key, then the responses holding them). One index per client key
# (tenant): item ids are chosen by clients, so a global index let one key squat another's ids
# (its entry, written first, made the owner's reference a 400) and learn which ids another key
# had used. Scoped, another key's entry can neither block nor be seen: an id another key uses
# looks exactly like an unknown one. Written with the response and with its TTL: output items
# when the final object is stored (their ids are ours, random, so a plain SET), input items at
# creation with NX (the same key resending an item keeps the first place it was stored; the
# holder's tenant is still checked on every read). A deleted or expired response leaves
# entries that point at nothing: they resolve to nothing and expire with the response's TTL.
# Only the response's location is kept (a few bytes per item), not a second copy of the item.
# CREATE_RESPONSE and FINISH_RESPONSE get these keys declared (scripts.py: a cluster moving the
# slot checks only declared keys).
ITEM_IN_OUTPUT: Final = "o"
ITEM_IN_INPUT: Final = "i"


def item_location(tenant: str, item_id: str, tag: str | None = None) -> str:
    """`tag`: the shard tag of the response holding the item (its index entry sits in that
    response's slot, written by the same script); None for an untagged response."""
    # The tenant (a digest, core/policy/tenancy.py: no ':' in it) comes first, so no item id can
    # make one tenant's key equal to another's.
    if tag is not None:
        return f"ix:{{{tag}}}:{tenant}:{item_id}"
    return f"ix:{{{tenant}:{item_id}}}"


def legacy_item_location(item_id: str) -> str:
    """The global index entry versions before the tenant-scoped item index wrote (`it:{<item id>}`).
    Never written now; `find_items` still reads it when the scoped entry is missing, so references
    to items stored before an upgrade keep resolving (the holder's tenant is checked, so such an
    entry only ever yields the caller's own items). They expire within one `--response-ttl` of the
    upgrade; this read can go after that."""
    return f"it:{{{item_id}}}"


# -- conversations --------------------------------------------------------------------------

# The conversation object without its metadata, as orjson bytes.
F_CONV_OBJECT: Final = "obj"
# Metadata apart from `obj`: `update_conversation` replaces it in Lua without decoding JSON.
F_CONV_META: Final = "meta"
# Insertion counter: the score of the next item in `:order`. Never reused, so deleting an item
# leaves the order of the others intact.
F_CONV_NEXT: Final = "next"


def conversation(conversation_id: str) -> str:
    return f"cv:{_slotted(conversation_id)}"


def conversation_order(conversation_id: str) -> str:
    """Item ids by insertion number: ZRANK turns an `after` cursor into a position in one
    command, and ZRANGE/ZREVRANGE serve both orders."""
    return f"cv:{_slotted(conversation_id)}:order"


def conversation_items(conversation_id: str) -> str:
    """Item bodies by id: `get_conversation_item` is one HGET, deletion one HDEL."""
    return f"cv:{_slotted(conversation_id)}:items"


# -- background jobs ------------------------------------------------------------------------
# The queue serves client keys (tenants) fairly (store/jobqueue.py). A queued job waits in its
# key's own sub-queue (a run of numbered fields of one hash); the keys that have queued jobs
# wait in two lists, the newly ready first; `take` moves the next key's oldest job into the
# stream and delivers it in one script, so the stream holds running jobs only (plus entries an
# older release queued into it directly, still delivered first). Every key below shares the
# `{queue}` hash tag: every job script touches one slot and declares all its keys.
# None of these keys expires: each entry lives exactly as long as its job (a TTL would drop
# every queued and running job at once). They are bounded instead: `enqueue` refuses a key past
# its share (`--max-queued-jobs`) and the whole queue past `--max-queued-jobs-total`, both
# counted as queued + running, in the script that adds.

# The running jobs: a stream read through one consumer group. XREADGROUP hands an entry to one
# consumer; the group's pending list records who owns it and for how long it has been idle.
JOB_QUEUE: Final = "jobs:{queue}"
# Queued jobs by `<tenant> <n>` (n: the job's place in its key's sub-queue).
JOB_WAITING: Final = "jobs:{queue}:jobs"
# `<tenant>:h`: the n of the key's next job to take; `<tenant>:t`: the n its next job gets.
# Both fields go when the key has nothing queued, so the hash holds only keys that wait.
JOB_OWNERS: Final = "jobs:{queue}:owners"
# Keys with queued jobs, each in exactly one of the two lists: `new` (not served since it had
# nothing queued; served first, in arrival order) and `old` (served round robin).
JOB_READY_NEW: Final = "jobs:{queue}:new"
JOB_READY_OLD: Final = "jobs:{queue}:old"
# tenant -> " <entry id> <entry id> ": the key's running jobs, for its share of the bound.
JOB_RUNNING: Final = "jobs:{queue}:run"
# Wake-up tokens: `enqueue` and `requeue` push one, a worker with nothing to take waits on it
# (BLPOP, bounded). Trimmed to `JOB_WAKE_MAX`: a token nobody waits for only costs one extra
# take.
JOB_WAKE: Final = "jobs:{queue}:wake"
JOB_WAKE_MAX: Final = 64
# Every key a job script declares, in this order (scripts.py reads them as KEYS[1..7]).
JOB_KEYS: Final = (JOB_QUEUE, JOB_WAITING, JOB_OWNERS, JOB_READY_NEW, JOB_READY_OLD,
                   JOB_RUNNING, JOB_WAKE)
JOB_GROUP: Final = "workers"
# Entry field names. The job scripts (scripts.py) spell the same names: change both together.
# One letter each: a queued job's spec is the bulk of the entry; the names are overhead.
F_JOB_RESPONSE: Final = "r"
F_JOB_SPEC: Final = "s"
# The key (tenant) the job counts for; absent on entries an older release queued.
F_JOB_OWNER: Final = "k"
# Cancellations, broadcast to every worker (only the one running the job acts on it). Pub/sub
# stores nothing: a worker that misses a message sees the status change at its next heartbeat.
JOB_CANCEL_CHANNEL: Final = "jobs:cancel"


# -- the response cache (services/cache/responses.py)
# ------------------------------------------------- Keys are digests (core/cache/key.py): no prompt
# text ever appears in a key. Every key carries the tenant, so one key's entries are never
# another's, and nothing is found by pattern.
#
#   ce:<tenant>:<exact>                 STRING  one cached answer (JSON), EX --cache-ttl
#   cn:{<tenant>:<ns>}:v                HASH    member -> guard \0 float32 vector
#   cn:{<tenant>:<ns>}:o                ZSET    member scored by its expiry (unix seconds)
#   cn:{<tenant>:<ns>}:b:<bucket>       SET     the members of one hyperplane bucket
# A member is `<bucket>:<exact>`: the namespace scripts find a member's bucket set without
# decoding anything. One namespace's keys share a hash tag (one cluster slot, one script).


def cache_entry(tenant: str, exact: str) -> str:
    """One answer, JSON and SSE clients alike; it expires by itself after --cache-ttl."""
    return f"ce:{tenant}:{exact}"


def cache_vectors(tenant: str, namespace: str) -> str:
    """The namespace's vectors with their guards, read only for the probed buckets' members."""
    return f"cn:{{{tenant}:{namespace}}}:v"


def cache_order(tenant: str, namespace: str) -> str:
    """Members by expiry: the write script drops the expired and, past the namespace bound,
    the oldest, so the namespace stays bounded without a scan."""
    return f"cn:{{{tenant}:{namespace}}}:o"


def cache_bucket_prefix(tenant: str, namespace: str) -> str:
    """Prefix of the bucket sets; the scripts append the bucket number."""
    return f"cn:{{{tenant}:{namespace}}}:b:"

# -- per-key limits (`--keys-file`, services/metering/limits.py)
# ------------------------------------- All keys of one client key share the hash tag `{<tenant>}`
# (the digest web/middleware/auth.py makes; the key itself is never stored), so each limit script
# touches one cluster slot.

# The current minute's counters: `w` (the minute, from the Redis server's clock, so instances
# with skewed clocks still share one window), `r` (requests admitted), `t` (tokens used). A
# fixed window, reset by the first script that sees a new minute. Lives a little over a minute.
F_LIMIT_WINDOW: Final = "w"
F_LIMIT_REQUESTS: Final = "r"
F_LIMIT_TOKENS: Final = "t"
LIMIT_MINUTE_TTL_MS: Final = 120_000


def limit_minute(tenant: str) -> str:
    return f"lim:{{{tenant}}}:minute"


def limit_used(tenant: str) -> str:
    """Tokens used in total, for `token_budget`. The second key without a TTL: a budget that
    expired would silently refill. Bounded instead: one small string per configured key."""
    return f"lim:{{{tenant}}}:used"


def limit_streams(tenant: str) -> str:
    """Open streams and running background jobs: a ZSET of lease ids scored by their expiry
    (ms, server clock). Its holder renews a lease while the stream runs; a lease whose instance
    died expires and is dropped by the next admission, so no slot leaks for ever. The key
    itself expires when no lease is renewed for twice a lease's life."""
    return f"lim:{{{tenant}}}:streams"


def stored_bytes(tenant: str, tag: str | None = None) -> str:
    """The storage ledger (ledger.py): bytes of the key's stored responses and conversations,
    a HASH of {the second they stop counting -> bytes}. Expires with its last bucket. Every
    script that counts a response's bytes gets it declared (scripts.py). `tag`: the ledger of
    the key's objects under one shard tag (in their slot, so their scripts count them); a
    key's total is the untagged ledger (files, prompts, untagged objects) plus one per tag."""
    if tag is not None:
        return f"lim:{{{tag}}}:{tenant}:stored"
    return f"lim:{{{tenant}}}:stored"


# On each response and conversation hash: the bytes the ledger counts for it and the bucket
# (the second they stop counting) they sit in, so a delete or a TTL renewal moves exactly them.
F_STORED_BYTES: Final = "bytes"
F_STORED_UNTIL: Final = "until"

# -- foreground ownership (leases) ----------------------------------------------------------
# Who still writes each foreground stored response: member = response id, score = the lease's
# deadline in milliseconds of the Redis server's clock (TIME inside the scripts: every instance
# reads the same clock, whatever their own drift). The instance serving a response renews it
# every third of `--lease-ttl`, for all its responses in one call; an entry whose deadline has
# passed is a writer that died (kill -9, a lost host), and whoever finds it closes the response
# (services/eventlog/ownership.py). A sorted set so that the expired ones are one ZRANGEBYSCORE
# away, never a SCAN; bounded because entries leave when their response ends (or is reaped), and an
# entry never renewed is reaped within two lease periods.
LEASES: Final = "leases:{live}"


def leases(tag: str | None) -> str:
    """The lease set of one shard tag's responses (untagged ones: `LEASES`)."""
    return f"leases:{{{tag}}}" if tag is not None else LEASES


def response_reaper(response_id: str) -> str:
    """Claim (SET NX PX) on closing a response whose lease expired: of the instances that notice
    it, one closes it; the claim expires with a lease period, so a reaper that dies too is
    replaced."""
    return f"rp:{_slotted(response_id)}:reaper"


# -- the per-deployment fleet secret (services/process/sealing.py)
# ---------------------------------- Without `--fleet-secret`, the first instance to start SET NXs
# a random secret here and every instance and worker of the deployment reads it at start, so a blob
# sealed by one opens on all of them and no one outside the deployment can seal one. No TTL, on
# purpose: the secret must outlive every blob handed out (clients keep them; stored responses live
# `--response-ttl`), and a secret that expired would be replaced by a new one that opens none of
# them. Bounded: one 32-byte string per deployment.
FLEET_SECRET: Final = "fleet:secret"

# -- files (`/v1/files`, store/objects/files.py) and prompts (`/v1/prompts`,
# store/objects/prompts.py)
# ------------------------------------------------------------------------------------------ All of
# one client key's files and prompts share its hash tag `{<tenant>}` (the tag of its storage ledger
# too), so every script touches one slot; the cost is that one key's files sit on one cluster node
# (bounded by its storage budget). A file lives `--response-ttl` (or its `expires_after`, when
# shorter) and its three keys expire with it; the list ZSETs live as long as their longest-lived
# member, and ids whose object expired are dropped from them by the next listing that meets them
# (never found by pattern).


def file_record(tenant: str, file_id: str) -> str:
    return f"fl:{{{tenant}}}:{file_id}"


def file_chunks(tenant: str, file_id: str) -> str:
    return f"fl:{{{tenant}}}:{file_id}:c"


def file_index(tenant: str) -> str:
    return f"fl:{{{tenant}}}:list"


def prompt_record(tenant: str, prompt_id: str) -> str:
    return f"pm:{{{tenant}}}:{prompt_id}"


def prompt_index(tenant: str) -> str:
    return f"pm:{{{tenant}}}:list"


# -- vector stores (`/v1/vector_stores`, store/objects/vectors.py)
# ----------------------------------
# Under the key's tag `{<tenant>}` too: every script of a store (add files, finish one, delete)
# touches one slot. Every key of a store lives as long as the store (its `expires_after`, never
# past `--response-ttl`) and is renewed with it; a file's chunks are bounded per store
# (`--vector-store-max-chunks`), its files too (`--vector-store-max-files`).


def vector_store(tenant: str, vs_id: str) -> str:
    return f"vs:{{{tenant}}}:{vs_id}"


def vector_store_files(tenant: str, vs_id: str) -> str:
    return f"vs:{{{tenant}}}:{vs_id}:f"


def vector_store_batches(tenant: str, vs_id: str) -> str:
    return f"vs:{{{tenant}}}:{vs_id}:b"


def vector_store_chunks(tenant: str, vs_id: str, file_id: str) -> str:
    return f"vs:{{{tenant}}}:{vs_id}:v:{file_id}"


def vector_store_index(tenant: str) -> str:
    return f"vs:{{{tenant}}}:list"
