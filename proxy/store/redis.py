"""`RedisStore`: the `Store` protocol over redis-py's asyncio client.

The same class serves both backends: a real Redis server (production) and fakeredis's
in-process server (the embedded store). See keys.py for the layout and scripts.py for what runs
atomically.

Invariants:
- Round trips are constant per call: one command, one script or one pipeline; `load_chain` two
  (the target, then every ancestor at once) whatever the chain's depth; `find_items` two (where
  the items live, then every response holding one). Storing a response's items in the item
  index, and a foreground response's lease, ride in the script that stores the response (one
  EVALSHA: a redis-py pipeline costs the proxy more CPU than the round trip it carries).
- Every Redis failure that means "the store is not answering" becomes `StoreUnavailable` where it
  happens (`raise ... from exc`). A `ResponseError` from a script is a bug and propagates.
- Reads are retried once on a dropped connection (a pooled socket a Redis restart closed); writes
  never are: a write that may have been applied is not replayed blindly (a status CAS replayed
  after it succeeded would answer "refused"). Timeouts are never retried: the server is stuck
  and the caller should get its 503 now.
- The blocking read (`tail`) never blocks longer than `max_block_ms`, which the factory keeps
  below the socket timeout: a quiet log must not look like a dead server.
- Objects cross as orjson bytes and are decoded only here; Lua never parses JSON.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import orjson
from redis import exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from proxy.core.policy.storagebudget import UNLIMITED, StorageBudget, storage_exceeded
from proxy.core.shardtags import TAGS, tag_of
from proxy.core.types import TERMINAL_STATUSES, Item, ResponseObject
from proxy.store import keys
from proxy.store.base import Chain, EventRow, ResponseRecord, StoredEvent, Transition
from proxy.store.budget.headroom import Headroom
from proxy.store.budget.ledger import LEDGER_HELD
from proxy.store.connection.coalesce import ScriptCoalescer
from proxy.store.connection.failures import raise_mapped, read_retrying, store_errors
from proxy.store.connection.reconnect import Reconnector
from proxy.store.connection.replication import ReplicaWait
from proxy.store.conversations import RedisConversations, check_ttl
from proxy.store.lua import scripts
from proxy.store.lua.decoding import (
    NO_OBJECTS,
    Objects,
    entries_events,
    events_of,
    finished_of,
    held_items,
    item_ids,
    items_of,
    record_of,
    referring,
    transition_of,
)
from proxy.store.lua.packing import (
    MAX_EVENTS_PER_CALL,
    HashKeys,
    by_tag,
    flush_calls,
    packed,
)
from proxy.store.lua.references import FirstObjects, final_write, packed_final

# Re-exported: the other adapters on the store's client import them from here.
__all__ = ["MAX_EVENTS_PER_CALL", "RedisStore", "read_retrying", "store_errors"]

# Default ceiling for one blocking read; the factory sets it from the socket timeout.
DEFAULT_MAX_BLOCK_MS = 2_000

_RESPONSE_FIELDS = (
    keys.F_STATUS, keys.F_TENANT, keys.F_OBJECT, keys.F_PARENTS, keys.F_LOGGED, keys.F_CLOSED,
)


class RedisStore(RedisConversations):
    """The one `Store` implementation. `embedded` is True over the in-process server (state
    lives and dies with the process). `budget`: the bytes each key may keep stored (none by
    default; the runtime passes the configured ones)."""

    def __init__(self, client: Redis, *, embedded: bool = False,
                 max_block_ms: int = DEFAULT_MAX_BLOCK_MS,
                 budget: StorageBudget = UNLIMITED, reconnector: Reconnector | None = None,
                 wait_replicas: int = 0, sharded: bool = False,
                 compact_log: bool = True) -> None:
        super().__init__(client, budget, sharded=sharded)
        self.embedded = embedded
        # Event-log entries keep runs of deltas compact (`--event-log-format`, compact by
        # default; store/lua/packing.py); False: in full, as releases before c405424 read them.
        self.compact_log = compact_log
        self._max_block_ms = max_block_ms
        # None (the embedded store): nothing to reconnect to, `reconnect` is a no-op.
        self._reconnector = reconnector
        # The replicas a response's create and final write wait for (`--redis-wait-replicas`).
        self.replication = ReplicaWait(wait_replicas)
        # Registered once: each keeps its sha and is loaded into the server on first use (and
        # again after a restart emptied the server's script cache).
        self._create = client.register_script(scripts.CREATE_RESPONSE)
        self._append = client.register_script(scripts.APPEND_EVENTS_MANY)
        self._mark_followed = client.register_script(scripts.MARK_FOLLOWED)
        self._transition = client.register_script(scripts.TRANSITION)
        self._finish = client.register_script(scripts.FINISH_RESPONSE)
        self._delete = client.register_script(scripts.DELETE_RESPONSE)
        self._held = client.register_script(LEDGER_HELD)
        self._hash_keys = HashKeys()  # the flush's keys of the live streams (packing.py)
        # The create-time objects of the streamed responses created here (references.py).
        self._firsts = FirstObjects()
        # Creates and final writes of one loop turn share a pipeline (coalesce.py).
        self._coalesced = ScriptCoalescer(client)
        self._headroom = Headroom(time.monotonic)  # one primary: what our creates saw
        # A key's held bytes being read: the checks waiting on that read (`_held_once`).
        self._reading: dict[str, tuple[asyncio.Future[int], list[asyncio.Future[int]]]] = {}

    @property
    def max_block_ms(self) -> int:
        """The longest blocking read this client may issue (below its socket timeout). Other
        users of `client` (XREADGROUP BLOCK, ...) must stay under it too."""
        return self._max_block_ms

    @property
    def client(self) -> Redis:
        """The underlying client, for other Redis users of the process to share its pool."""
        return self._client

    # -- lifecycle ---------------------------------------------------------------------------

    async def ping(self) -> None:
        await self._read(self._client.ping)

    async def reconnect(self) -> None:
        if self._reconnector is not None:
            await self._reconnector.reconnect()

    async def aclose(self) -> None:
        await self._coalesced.aclose()
        if self.sharded:
            await self._client.aclose()  # the cluster client closes its nodes' pools
        else:
            await self._client.aclose(close_connection_pool=True)
        if self._reconnector is not None:
            await self._reconnector.aclose()

    # -- responses ---------------------------------------------------------------------------

    async def create_response(self, record: ResponseRecord, input_items: Sequence[Item], *,
                              events: Sequence[EventRow] = (), ttl: int,
                              event_ttl: int, lease_ms: int | None = None) -> None:
        if ttl <= 0 or event_ttl <= 0:  # (`check_ttl`'s two calls, only to say why)
            check_ttl(ttl, event_ttl)
        if lease_ms is not None and lease_ms <= 0:
            raise ValueError(f"lease_ms must be positive, got {lease_ms}")
        rid, tenant = record.id, record.tenant
        tag = tag_of(rid)
        budget = self._budget.of(tenant)
        # No budget, or one primary (nearly always): the room is the budget, with no coroutine
        # of `_room`'s to say so.
        room = budget
        if budget > 0 and self._ledgers is not None:
            budget, room = await self._room(tenant, tag)
        # One script call (scripts.CREATE_RESPONSE): the budget check, the record, its input,
        # its first events, its input items' index entries, its bytes in the ledger and, when
        # asked, its lease; all in the response's slot (its shard tag's, when it has one).
        response_keys, ledger = keys.response_keys(rid, tag), keys.stored_bytes(tenant, tag)
        keys_ = [*response_keys, keys.leases(tag), ledger,
                 *[keys.item_location(tenant, item_id, tag)
                   for item_id in item_ids(input_items)]]
        obj = orjson.dumps(record.response)
        # (The numbers as one argument: scripts.CREATE_RESPONSE says why.)
        args: list[Any] = [
            b"%d %d %d %d %d%d" % (ttl, event_ttl, lease_ms or 0, room, record.logged,
                                   record.closed),
            record.status, tenant, obj, orjson.dumps(record.parents),
            orjson.dumps(list(input_items)), record.replica or "", rid,
            f"{keys.ITEM_IN_INPUT}:{rid}",
        ]
        if events:
            args.append(packed(events, compact=self.compact_log))
        try:  # (`store_errors`, without its calls: failures.py `raise_mapped`)
            written, held, *size = await self._waited(self._create, keys_, args)
        except BaseException as exc:
            raise_mapped(exc)
            raise
        if not written:
            self._headroom.forget(tenant)
            raise storage_exceeded(budget, held + budget - room)
        if record.logged and not events:
            # A streamed foreground create: its final write's first two events may refer to
            # this object (references.py compares them; FINISH_RESPONSE keeps it as `first`).
            # (Its keys too: the final write declares the same ones first.)
            self._firsts.remember(rid, obj, tenant, tag, (*response_keys, ledger))
        if self._ledgers is not None:
            self._ledgers.note(tenant, tag, held + size[0])
        else:
            self._headroom.note(tenant, held + size[0])

    async def get_response(self, tenant: str, response_id: str) -> ResponseRecord | None:
        record = await self.get_response_any(response_id)
        return record if record is not None and record.tenant == tenant else None

    async def get_response_any(self, response_id: str) -> ResponseRecord | None:
        values = await self._read(
            lambda: self._client.hmget(keys.response(response_id), _RESPONSE_FIELDS))
        return record_of(values)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        if self._untagged(response_id):
            return False  # cannot exist here (a cluster holds tagged ids only)
        with store_errors():
            done = await self._delete(
                keys=[*_response_keys(response_id), keys.stored_bytes(tenant, tag_of(response_id))],
                args=[tenant])
        self._wrote(tenant)
        return bool(done)

    async def stored_bytes(self, tenant: str) -> int:
        if self.sharded:
            return sum((await self._read_ledgers(tenant)).values())
        with store_errors():
            return int(await self._held(keys=[keys.stored_bytes(tenant)]))

    async def check_storage(self, tenant: str, *, rechecked: bool = False) -> None:
        budget = self._budget.of(tenant)
        if budget <= 0:
            return  # unlimited: no round trip
        if rechecked and self._ledgers is None and self._headroom.clear_below(tenant, budget):
            return  # our own create just saw it well inside (headroom.py: why that is safe)
        # On a cluster: the view of the key's ledgers (ledgerview.py), not 33 reads per check.
        if self._ledgers is not None:
            held = sum((await self._ledgers.held(tenant)).values())
        else:
            held = await self._held_once(tenant)
        if held >= budget:
            raise storage_exceeded(budget, held)

    async def _held_once(self, tenant: str) -> int:
        """The key's stored bytes, read once for every check of it in flight: a burst of one
        key's creates after a quiet second would otherwise each read it (a py-spy profile of a
        256-stream burst put 14% of the proxy's samples in these reads). One read, in a task of
        its own, and a future per check that its end resolves: a check whose client leaves is
        cancelled alone, never the read the others wait on. (Not `asyncio.shield` per check:
        that hung two callbacks on the read and made three loop steps per check where the
        read's end makes one: ~100 Python opcodes and two handles per stored create in a
        burst, `bench.instructions`' set-up.)"""
        reading = self._reading.get(tenant)
        if reading is None:
            read = asyncio.ensure_future(self.stored_bytes(tenant))
            # (The read held here too: the loop keeps only a weak reference to a task.)
            reading = self._reading[tenant] = (read, [])
            read.add_done_callback(functools.partial(self._read_done, tenant, reading[1]))
        waiters = reading[1]
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        return await waiter

    def _read_done(self, tenant: str, waiters: list[asyncio.Future[int]],
                   read: asyncio.Future[int]) -> None:
        """A shared read's end, to each check still waiting on it (`_held_once`)."""
        reading = self._reading.get(tenant)
        if reading is not None and reading[1] is waiters:
            del self._reading[tenant]
        if read.cancelled():  # the store closing: the checks end as the read did
            for waiter in waiters:
                waiter.cancel()
            return
        failure = read.exception()
        held = 0
        if failure is None:
            held = read.result()
            self._headroom.note(tenant, held)  # once a read, not once a check
        for waiter in waiters:
            if waiter.done():  # its check was cancelled meanwhile
                continue
            if failure is None:
                waiter.set_result(held)
            else:
                waiter.set_exception(failure)

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        def queue(pipe: Pipeline) -> None:
            pipe.hget(keys.response(response_id), keys.F_TENANT)
            pipe.get(keys.response_input(response_id))

        owner, raw = await self._read(lambda: self._pipelined(queue))
        if owner is None or owner.decode() != tenant:
            return None
        return items_of(raw)

    async def load_chain(self, tenant: str, response_id: str) -> Chain | None:
        # Round trip 1: the target (owner, object, ancestors) and its input items.
        def queue_target(pipe: Pipeline) -> None:
            pipe.hmget(keys.response(response_id), keys.F_TENANT, keys.F_OBJECT, keys.F_PARENTS,
                       keys.F_REPLICA)
            pipe.get(keys.response_input(response_id))

        (owner, obj, parents_raw, replica), inputs = await self._read(
            lambda: self._pipelined(queue_target))
        if owner is None or obj is None or owner.decode() != tenant:
            return None
        parents: tuple[str, ...] = tuple(orjson.loads(parents_raw)) if parents_raw else ()
        items = await self._ancestor_items(tenant, parents) if parents else []
        target: ResponseObject = orjson.loads(obj)
        items += items_of(inputs)
        items += target.get("output") or []
        model = target.get("model")
        return Chain(items=items, parents=(*parents, response_id),
                     model=model if isinstance(model, str) else None,
                     replica=replica.decode() if replica else None)

    async def _ancestor_items(self, tenant: str, parents: Sequence[str]) -> list[Item]:
        # Round trip 2: every ancestor at once. One that expired or was deleted is skipped; one
        # owned by someone else (it cannot happen through the API) is skipped too.
        def queue(pipe: Pipeline) -> None:
            for parent in parents:
                pipe.hmget(keys.response(parent), keys.F_TENANT, keys.F_OBJECT)
                pipe.get(keys.response_input(parent))

        replies = await self._read(lambda: self._pipelined(queue))
        items: list[Item] = []
        for (owner, obj), inputs in zip(replies[::2], replies[1::2], strict=True):
            if owner is None or obj is None or owner.decode() != tenant:
                continue
            items += items_of(inputs)
            items += orjson.loads(obj).get("output") or []
        return items

    async def transition(self, response_id: str, *, tenant: str, allowed_from: frozenset[str],
                         to: str, response: ResponseObject | None = None,
                         ttl: int) -> Transition:
        check_ttl(ttl)
        replace = response is not None
        args: list[Any] = [to, ttl, _flag(replace),
                           orjson.dumps(response) if replace else b"", tenant,
                           *sorted(allowed_from)]
        keys_ = [*_response_keys(response_id)[:2],
                 keys.stored_bytes(tenant, tag_of(response_id))]
        with store_errors():
            reply = await self._transition(keys=keys_, args=args)
        return transition_of(reply)

    async def finish_response(self, response: ResponseObject, terminal: StoredEvent | None, *,
                              tenant: str, ttl: int, event_ttl: int,
                              events: Sequence[EventRow] = ()) -> Transition:
        if ttl <= 0 or event_ttl <= 0:  # (`check_ttl`'s two calls, only to say why)
            check_ttl(ttl, event_ttl)
        status = response.get("status")
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"finish_response needs a terminal status, got {status!r}")
        logged = [*events, terminal] if terminal is not None else events
        seqs = [event[0] for event in logged]  # a stream's tail: two dozen events at 0 ms
        if any(map(operator.ge, seqs, seqs[1:])):  # no generator frame per pair
            raise ValueError("finish_response needs its events in ascending sequence order")
        rid = str(response["id"])
        # What this process's create of it remembered (a streamed one: None for a stored JSON
        # answer, which has no log).
        known = self._firsts.first(rid) if logged else None
        if known is not None and known.tenant == tenant:
            tag, first_keys = known.tag, known.keys
        else:
            tag = tag_of(rid)
            first_keys = (*keys.response_keys(rid, tag), keys.stored_bytes(tenant, tag))
        # One script call (scripts.FINISH_RESPONSE): the output items' index entries and the
        # ledger included, all declared (a cluster moving the slot checks only declared keys).
        keys_ = [*first_keys, *[keys.item_location(tenant, item_id, tag)
                                for item_id in item_ids(response.get("output") or ())]]
        obj: bytes | memoryview
        obj, length = _final_object(response, terminal)
        # Events byte-identical to an object the record keeps go as references (keys.py, "the
        # event log's references"): the create-time one's two, the terminal's.
        blob, head, final, first = b"", b"", b"", None
        if logged:  # (a stored JSON answer has no log)
            # (b"": a flush carried its event 0, `FirstObjects.began`: no head references)
            first = (known.obj or None) if known is not None else None
            write = final_write(events, terminal, first, length)
            if write.obj is not None:
                obj, length = write.obj, 0  # the terminal is not sent: its object is, once
            blob = packed_final(write.inline, compact=self.compact_log)
            head, final = write.head, write.final
        args: list[Any] = [status, obj, ttl, event_ttl, f"{keys.ITEM_IN_OUTPUT}:{rid}",
                           blob, tenant, length, head, final, len(first) if head and first else 0]
        try:  # (`store_errors`, without its calls: failures.py `raise_mapped`)
            reply = await self._waited(self._finish, keys_, args)
        except BaseException as exc:
            raise_mapped(exc)
            raise
        self._firsts.forget(rid)
        return finished_of(reply, response)

    def _waited(self, script: AsyncScript, keys_: list[str], args: list[Any]) -> Awaitable[Any]:
        """`script` (a response's create or its final write), waited for as
        `--redis-wait-replicas` asks (store/connection/replication.py). The call's awaitable
        itself, not a coroutine awaiting it: a frame less per create and final write."""
        if self.replication.replicas:
            return self.replication.run(self._client, script, keys_, args)
        if self.sharded:  # each call to its slot's node
            return script(keys=keys_, args=args)
        return self._coalesced(script, keys_, args)

    async def find_items(self, tenant: str, item_ids: Sequence[str]) -> dict[str, Item]:
        wanted = list(dict.fromkeys(item_ids))
        if not wanted:
            return {}

        places = self._index_places(tenant)

        def queue_locations(pipe: Pipeline) -> None:
            for item_id in wanted:
                for place in places:
                    pipe.get(place(item_id))

        # Round trip 1: where each item lives: this key's entry, else one an older version
        # wrote to its global index (keys.py; the holder's owner is checked below either way);
        # on a cluster, the entry under each shard tag (a client-chosen item id says nothing
        # of the response holding it), in one pipeline per node.
        found_at = await self._read(lambda: self._pipelined(queue_locations))
        n = len(places)
        locations = [next((raw for raw in found_at[i:i + n] if raw), None)
                     for i in range(0, len(found_at), n)]
        holders = sorted({raw.decode() for raw in locations if raw})
        if not holders:
            return {}

        def queue_holders(pipe: Pipeline) -> None:
            for holder in holders:
                where, rid = holder.split(":", 1)
                if where == keys.ITEM_IN_OUTPUT:
                    pipe.hmget(keys.response(rid), keys.F_TENANT, keys.F_OBJECT)
                else:
                    pipe.hmget(keys.response(rid), keys.F_TENANT)
                    pipe.get(keys.response_input(rid))

        # Round trip 2: every response holding one of them, at once; another tenant's, or one
        # deleted or expired since, holds nothing.
        replies = await self._read(lambda: self._pipelined(queue_holders))
        found: dict[str, Item] = {}
        wanted_set = set(wanted)
        for item in held_items(holders, iter(replies), tenant):
            item_id = item.get("id")
            if item_id in wanted_set and item_id not in found:
                found[item_id] = item
        return found

    def _index_places(self, tenant: str) -> list[Callable[[str], str]]:
        """Where an item's index entry may be, in order of preference."""
        if self.sharded:
            return [functools.partial(keys.item_location, tenant, tag=tag) for tag in TAGS]
        return [functools.partial(keys.item_location, tenant),
                keys.legacy_item_location]

    # -- event logs --------------------------------------------------------------------------

    async def append_events(self, batches: Mapping[str, Sequence[EventRow]], *,
                            ttl: int) -> Collection[str]:
        check_ttl(ttl)
        batches = {rid: events for rid, events in batches.items() if events}
        if not batches:
            return ()
        firsts = self._firsts
        for rid, events in batches.items():  # (a stream's first flush carries its event 0)
            if not events[0][0]:
                firsts.began(rid)
        key_of, compact = self._hash_keys.__getitem__, self.compact_log
        calls = flush_calls(batches, key_of, compact) if not self.sharded else [
            call for part in by_tag(batches).values()
            for call in flush_calls(part, key_of, compact)]
        with store_errors():
            try:
                replies = await self._append_all(calls, ttl)
            except rex.NoScriptError:
                # The server lost its script cache (a restart). Load the script and send the
                # batch again: the events that did land are skipped as duplicates.
                await self._client.script_load(scripts.APPEND_EVENTS_MANY)
                replies = await self._append_all(calls, ttl)
        # Each call's reply: the hash keys of its streams followed from another instance
        # (scripts.py); nearly always none, so the keys are matched to ids only then.
        followed = {key for reply in replies for key in reply or ()}
        if not followed:
            return ()
        return {rid for rid in batches if key_of(rid) in followed}

    async def _append_all(self, calls: list[tuple[list[bytes], list[bytes | int]]],
                          ttl: int) -> list[Any]:
        # One EVALSHA for every stream of the flush (scripts.APPEND_EVENTS_MANY), sent as is:
        # redis-py's Script objects would add a SCRIPT EXISTS round trip to every flush. A
        # flush bigger than `MAX_EVENTS_PER_CALL`, or (on a cluster) holding streams of
        # several shard tags, goes as several calls in one round trip (per node on a cluster).
        # One primary declares no key (nothing moves there; a key fewer to encode per flush).
        if self.sharded:
            # A cluster's call declares every key it writes, each stream's hash and log: while
            # the slot moves, Redis judges where a script may run by its declared keys only,
            # and an undeclared log still on the old node was made a second time on the new
            # one (scripts.py). Split keys answer TRYAGAIN; the flush is tried again.
            # redis-py's cluster pipeline refuses scripts: the calls go side by side, each to
            # its tag's node (still one round trip's wait).
            return list(await asyncio.gather(*(
                self._client.evalsha(self._append.sha, 2 * len(hashes),
                                     *[key for h in hashes for key in (h, h + b":log")],
                                     ttl, *args)
                for hashes, args in calls)))
        # One primary: through the coalescer, on its held connection (coalesce.py), beside the
        # creates and final writes of the same loop turn: redis-py's lone command cost ~65 µs
        # of Python per flush (a pool checkout, the retry wrapper, a reply coroutine). A lost
        # script is loaded and the call sent again there.
        if len(calls) == 1:
            return [await self._coalesced(self._append, [], [ttl, *calls[0][1]])]
        return list(await asyncio.gather(*(self._coalesced(self._append, [], [ttl, *args])
                                           for _route, args in calls)))

    async def mark_followed(self, response_id: str) -> None:
        with store_errors():
            await self._mark_followed(keys=[keys.response(response_id)])

    async def read_events(self, response_id: str, *, after: int = -1,
                          limit: int | None = None) -> list[StoredEvent]:
        # From the entry `1-<after>` itself: its id is its last inline event's, and the log's
        # last entry may hold the next one, the terminal, by reference (keys.py). The next one
        # holds after + 1, and may also hold events up to `after`: skipped. `limit` entries
        # after the first hold at least `limit` events, so a page needs no second read; the
        # reply is bounded by the entries' size (packing.py).
        start, count = "-", limit
        if after >= 0:
            start = keys.log_entry_id(after)
            count = limit + 1 if limit is not None else None
        entries: Any = await self._read(
            lambda: self._client.xrange(keys.response_log(response_id), min=start, max="+",
                                        count=count))
        objects = await self._objects_for(response_id, entries)
        events = entries_events(entries, after, objects)
        return events if limit is None else events[:limit]

    async def _objects_for(self, response_id: str, entries: Any) -> Objects:
        """The record's objects that `entries` refer to (keys.py, "the event log's
        references"): read only for a log's first and last entries, which a reader meets once."""
        if not entries or not any(referring(fields) for _id, fields in entries):
            return NO_OBJECTS
        first, final = await self._read(lambda: self._client.hmget(
            keys.response(response_id), keys.F_FIRST, keys.F_OBJECT))
        return _bytes_or_none(first), _bytes_or_none(final)

    async def log_extent(self, response_id: str) -> tuple[int, StoredEvent | None]:
        log_key = keys.response_log(response_id)

        def queue(pipe: Pipeline) -> None:
            pipe.xlen(log_key)
            pipe.xrevrange(log_key, max="+", min="-", count=1)
            pipe.hmget(keys.response(response_id), keys.F_EXTRA, keys.F_MORE, keys.F_HEAD)

        count, last, (extra, more, head) = await self._read(lambda: self._pipelined(queue))
        if not last:
            return 0, None
        # An entry holds one event or more (keys.F_EXTRA and keys.F_MORE count those beyond
        # one, F_EXTRA also the terminal held by reference; keys.F_HEAD the head's references).
        entry_id, fields = last[0]
        objects = await self._objects_for(response_id, last)
        events = events_of(entry_id, fields, int(entry_id[2:]) - 1, objects)
        return int(count) + int(extra or 0) + int(more or 0) + int(head or 0), events[-1]

    async def tail(self, positions: Mapping[str, int], *,
                   block_ms: int) -> dict[str, list[StoredEvent]]:
        """With no positions, returns {} at once. `block_ms` is capped at `max_block_ms` (the
        caller loops anyway); `block_ms <= 0` polls without blocking (Redis reads BLOCK 0 as
        "forever")."""
        if not positions:
            return {}
        block = min(block_ms, self._max_block_ms)
        if self.sharded:
            # One XREAD per shard tag (one reads one slot on a cluster), side by side: the
            # tail returns within `block` (50 ms by default) either way.
            parts = by_tag(positions)
            if len(parts) > 1:
                return await self._tail_each(list(parts.values()), block)
        return await self._tail(positions, block)

    async def _tail_each(self, parts: list[dict[str, int]],
                         block: int) -> dict[str, list[StoredEvent]]:
        """What is there already, from every part at once; else one blocking read per part,
        side by side, the first events ending them all (a read cancelled mid-wait costs its
        connection, which the pool replaces)."""
        found: dict[str, list[StoredEvent]] = {}
        for ready in await asyncio.gather(*(self._tail(part, 0) for part in parts)):
            found.update(ready)
        if found or block <= 0:
            return found
        pending = {asyncio.ensure_future(self._tail(part, block)) for part in parts}
        try:
            while pending and not found:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    found.update(task.result())
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        return found

    async def _tail(self, positions: Mapping[str, int],
                    block: int) -> dict[str, list[StoredEvent]]:
        streams: dict[Any, Any] = {
            keys.response_log(rid): _after_id(pos) for rid, pos in positions.items()
        }
        by_key = {keys.response_log(rid).encode(): rid for rid in positions}
        reply: Any = await self._read(
            lambda: self._client.xread(streams, block=block if block > 0 else None))
        found: dict[str, list[StoredEvent]] = {}
        for key, entries in reply or ():
            rid = by_key[key]
            # The first entry may start at or before the position (several events per entry).
            events = entries_events(entries, positions[rid],
                                    await self._objects_for(rid, entries))
            if events:
                found[rid] = events
        return found

# -- encoding -------------------------------------------------------------------------------


def _response_keys(response_id: str) -> list[str]:
    return [keys.response(response_id), keys.response_input(response_id),
            keys.response_log(response_id)]


def _final_object(response: ResponseObject, terminal: StoredEvent | None) -> tuple[bytes, int]:
    """The final write's object: `(b"", its length)` when it is the terminal event's `response`
    as every caller encodes that event (`{"type", "sequence_number", "response"}`, in that
    order: FINISH_RESPONSE cuts it from the event, the last bytes the call carries); else
    `(its JSON, 0)`. Encoding it apart was a second `orjson.dumps` of the whole object per
    final write, and sending it apart nearly doubled the write's bytes."""
    if terminal is not None:
        data = terminal.data
        head = b'{"type":"%s","sequence_number":%d,"response":' % (terminal.type.encode(),
                                                                  terminal.seq)
        if data.startswith(head) and data.endswith(b"}"):
            return b"", len(data) - len(head) - 1
    return orjson.dumps(response), 0


def _bytes_or_none(value: bytes | str | None) -> bytes | None:
    """A hash field as read back: b"" (an emptied `first`) and a missing one are None."""
    if not value:
        return None
    return value if isinstance(value, bytes) else value.encode()


def _flag(value: bool) -> str:
    return "1" if value else "0"




def _after_id(position: int) -> str:
    # XREAD returns ids strictly above the one given; `0-0` is below `1-0` (seq 0).
    return "0-0" if position < 0 else keys.log_entry_id(position)
