"""The `Store` protocol: everything the proxy keeps, behind one small async interface.

One implementation, `RedisStore` (store/redis.py), runs on two backends, checked by one contract
suite (tests/contract/):
- a real Redis server, shared by every instance: what production runs;
- the embedded store (no Redis URL): the same code over fakeredis's in-process server, so a
  single instance behaves exactly like a fleet of one (same Lua scripts, same key layout).

Rules every backend keeps:
- **Tenancy.** Every stored object belongs to the tenant that created it. A read, write or delete
  with another tenant behaves exactly as if the object did not exist (None / False), so the web
  layer answers 404 without learning that it exists.
- **Status is a compare-and-set.** `transition` and `finish_response` change a response's status
  only from an allowed one, atomically (one Lua script). Terminal statuses (completed, incomplete,
  failed, cancelled) are final, with one exception spelled out in `finish_response`.
- **The terminal event and the final object land together** (`finish_response`), so whoever has
  seen the terminal event can GET the final object from any instance.
- **Event logs are dense.** Events are appended in runs, one stream entry per run of a write
  (store/lua/packing.py), whose id is its last event's `sequence_number` (`1-<seq>`); reading
  returns them one by one, in order, from any number (the middle of an entry included); entries
  of the earlier one-event format read the same; a log is closed by its terminal event.
- **Everything expires** (`ttl` seconds, set at creation and renewed on update); nothing grows
  without bound (conversations cap their items, see `MAX_CONVERSATION_ITEMS`).
- **Bytes are bounded per tenant.** The bytes of a tenant's stored responses and conversations
  are counted as they are written and stop counting when they expire or are deleted
  (store/budget/ledger.py); a write that creates (a response, a conversation, items added through
  the API) is refused with `QuotaExceeded` (429 `insufficient_quota`) once the tenant holds its
  budget (core/policy/storagebudget.py), the check and the count in one atomic step. Writes that
  end a turn already running (its final object, its conversation append) count but are never
  refused.
- Failures of the backing service raise `StoreUnavailable` (503), never a raw client exception.

Values cross this interface as plain JSON-able dicts; events as their encoded JSON bytes (the
exact bytes the client got, so a replay is byte-identical).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from proxy.core.types import Item, ResponseObject

MAX_CONVERSATION_ITEMS = 10_000
# A `previous_response_id` chain longer than this is refused (the context would be enormous and
# every ancestor id travels in the record).
MAX_CHAIN_DEPTH = 1_000


class StoredEvent(NamedTuple):
    """One event of a response's log. A named tuple, not a frozen dataclass: one is made per
    streamed token of a stored response, and a frozen dataclass's `__init__` (a
    `object.__setattr__` per field) cost ~1 us per token against ~0.5 here (the per-token
    profile of the store-on row)."""

    seq: int
    type: str
    data: bytes  # the event's JSON, exactly as sent


# A stored event as the writes take it: `StoredEvent`'s three fields in a plain tuple (a
# `StoredEvent` is one too: readers keep the named fields). The writer hands its events over
# as an `EventRun` instead, which reads as a sequence of these.
EventRow = tuple[int, str, bytes]


# An `EventRun`'s rows by column: their types, their JSONs, and the JSONs' total length.
RunColumns = tuple[tuple[str, ...], tuple[bytes, ...], int]


class EventRun(Sequence[EventRow]):
    """Events numbered `first`, `first + 1`, ... held as the (type, JSON) pairs a turn encoded:
    how the writer keeps a stream's pending events and hands them to a write
    (services/eventlog/writer.py). Read as a sequence it gives `EventRow`s; the packing of a
    write (store/lua/packing.py `entries`) reads its columns instead. Why: a stored token is
    then one list append (its pair, made once for the client), where a numbered tuple a token,
    made and then taken apart again by the packing, cost ~1.5k instructions a stored token
    (`python -m bench.eventwriter` under callgrind)."""

    __slots__ = ("columns", "first", "rows")

    def __init__(self, first: int, rows: Sequence[tuple[str, bytes]],
                 columns: RunColumns | None = None) -> None:
        self.first = first
        self.rows = rows
        # The rows' types and JSONs by column and the JSONs' total length, when whoever cut
        # the run made them already (the writer, to size a held run's entry): the packing
        # reads them rather than make them again.
        self.columns = columns

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.numbered()[index]
        row = self.rows[index]
        return (self.first + (index if index >= 0 else len(self.rows) + index), *row)

    def __iter__(self) -> Iterator[EventRow]:
        return iter(self.numbered())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self.numbered() == list(other)

    __hash__ = None  # type: ignore[assignment]  # a view of a list that changes

    def __repr__(self) -> str:
        return f"EventRun({self.first}, {self.rows!r})"

    def numbered(self) -> list[EventRow]:
        """The events as `EventRow`s, by C loops (`zip` hands `tuple.__add__` the one number
        tuple it reuses)."""
        numbers = zip(range(self.first, self.first + len(self.rows)))
        return list(map(tuple.__add__, numbers, self.rows))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """A response as stored. `response["status"]` always equals the stored status (a backend
    keeps the status apart for its compare-and-set and overlays it on read)."""

    response: ResponseObject
    tenant: str
    # Ancestors through `previous_response_id`, oldest first, excluding this response.
    parents: tuple[str, ...] = ()
    # Has an event log been written for it (it was streamed, or runs in the background)?
    logged: bool = False
    # Has `finish_response` stored its final object (and the terminal event, when it was given)?
    # Its log then receives nothing more: a reader stops at what is there.
    closed: bool = False
    # The replica chosen to run it (its URL), where its follow-ups go; None when unknown.
    replica: str | None = None

    @property
    def id(self) -> str:
        return str(self.response["id"])

    @property
    def status(self) -> str:
        return str(self.response.get("status"))

    @property
    def background(self) -> bool:
        return bool(self.response.get("background"))


@dataclass(frozen=True, slots=True)
class Transition:
    """Result of a compare-and-set on a response's status."""

    changed: bool
    response: ResponseObject | None  # the object after the attempt; None if it does not exist


@dataclass(frozen=True, slots=True)
class Chain:
    """Context for a request that continues a stored response."""

    items: list[Item]  # every ancestor's input then output items, oldest first, then the target's
    parents: tuple[str, ...]  # the new response's ancestors: the target's parents + the target
    model: str | None = None  # the target's model (a hint for affinity and defaults)
    replica: str | None = None  # the replica that ran the target (its follow-ups go there)


@dataclass(frozen=True, slots=True)
class ItemPage:
    items: list[Item]
    has_more: bool


class Store(Protocol):
    # -- lifecycle ---------------------------------------------------------------------------
    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers."""

    async def reconnect(self) -> None:
        """Before a write that failed is retried: drop idle connections (they may point at a
        primary that is stuck or was replaced; the next one follows a failover) and raise
        StoreUnavailable unless the store answers a probe within a short bound (a second), so
        a retry on a stuck server does not wait out another socket timeout."""

    async def aclose(self) -> None: ...

    # -- responses ---------------------------------------------------------------------------
    async def create_response(
        self,
        record: ResponseRecord,
        input_items: Sequence[Item],
        *,
        events: Sequence[EventRow] = (),
        ttl: int,
        event_ttl: int,
        lease_ms: int | None = None,
    ) -> None:
        """Store a new response (any status) with its input items (already carrying ids) and,
        atomically with it, the first events of its log (e.g. created + queued).
        `lease_ms`: also take the response's writer lease (store/leases.py), `lease_ms` from
        now on the store's clock, in the same round trip (a stored foreground response,
        services/eventlog/ownership.py); a create that fails takes no lease. Raises QuotaExceeded,
        writing
        nothing, when the tenant already holds its storage budget."""

    async def get_response(self, tenant: str, response_id: str) -> ResponseRecord | None: ...

    async def get_response_any(self, response_id: str) -> ResponseRecord | None:
        """The same without the tenant check: for workers, which act for whoever queued."""

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """Remove the object, its input items and its event log. True if it existed."""

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        """The response's input items in request order; None if the response is unknown."""

    async def find_items(self, tenant: str, item_ids: Sequence[str]) -> dict[str, Item]:
        """The stored items with those ids (input or output items of this tenant's stored
        responses), by id; an id unknown to this tenant is absent, whatever other tenants
        store under it (the index is per tenant: another's ids neither block nor show). Two
        round trips however many ids (`item_reference` inputs)."""

    async def stored_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's stored responses and conversations that count against its
        storage budget now (one round trip)."""

    async def check_storage(self, tenant: str, *, rechecked: bool = False) -> None:
        """Raise QuotaExceeded when the tenant already holds its storage budget: what a
        request that will store checks before any upstream call. No round trip for a tenant
        without a budget. `rechecked`: the write that follows checks the budget again,
        atomically (a response's create), so the check may trust what this process saw of the
        key a moment ago; a write that counts its bytes without refusing (a file, a prompt's
        or an ingestion's) must not pass it."""

    async def load_chain(self, tenant: str, response_id: str) -> Chain | None:
        """Context for a request continuing `response_id` (its `previous_response_id`): for
        every ancestor of `response_id` and then `response_id` itself, its input items followed
        by its output items, oldest first. None if `response_id` is unknown to this tenant.
        Takes a constant number of round trips whatever the chain's depth (Redis: two).
        Ancestors that have expired or been deleted are skipped."""

    async def transition(
        self,
        response_id: str,
        *,
        tenant: str,
        allowed_from: frozenset[str],
        to: str,
        response: ResponseObject | None = None,
        ttl: int,
    ) -> Transition:
        """Atomically: if the stored status is in `allowed_from`, set status `to` (and, when
        given, replace the stored object with `response`) and return changed=True with the new
        object; otherwise change nothing and return changed=False with the stored object.
        `tenant`: the response's owner (its storage ledger is written, named up front); a
        response of another owner is an error and is left as it is."""

    async def finish_response(
        self, response: ResponseObject, terminal: StoredEvent | None, *, tenant: str, ttl: int,
        event_ttl: int, events: Sequence[EventRow] = (),
    ) -> Transition:
        """Atomically store the final object (its status is terminal) and append `events` (the
        stream's events not yet in its log, in order) then its terminal event (when given) to
        the log, if the stored status is queued or in_progress. As with `append_events`, an
        event whose number is not above the log's last one is skipped (a retry is harmless).
        One exception: a stored `cancelled` whose log is not yet closed accepts a final object
        that is `cancelled` too (the worker that ran it closes its log with the partial output).
        Otherwise nothing changes, the log included: changed=False with the stored object (e.g.
        a late completion after a cancel). `tenant`: the response's owner, as for `transition`.
        `terminal` is encoded from `{"type", "sequence_number", "response": response}` (a
        backend may keep the object as that event carries it). When it changed, the
        transition's object is `response` itself."""

    # -- event logs --------------------------------------------------------------------------
    async def append_events(self, batches: Mapping[str, Sequence[EventRow]], *,
                            ttl: int) -> Collection[str]:
        """Append each response's events in order, all in one round trip (the caller batches).
        Sequence numbers only grow; an event whose number is not above the log's last one is
        ignored (a retried batch is harmless). Returns the ids, among those written, of the
        responses whose log is followed live from another instance (`mark_followed`)."""

    async def mark_followed(self, response_id: str) -> None:
        """Note that the response's log is followed live from another instance than its
        writer's: the writer's next `append_events` reports it (it then stops holding the
        stream's events back for longer log entries: services/eventlog/writer.py). Nothing for
        an unknown response."""

    async def read_events(self, response_id: str, *, after: int = -1,
                          limit: int | None = None) -> list[StoredEvent]:
        """The stored events with seq > after, in order: all of them, or the first `limit`
        (Redis: `XRANGE ... COUNT`; callers page long logs instead of reading them whole)."""

    async def log_extent(self, response_id: str) -> tuple[int, StoredEvent | None]:
        """How many events the log holds and its last one (None when empty), in one round
        trip: a log is whole from 0 exactly when count == last.seq + 1."""

    async def tail(self, positions: Mapping[str, int], *,
                   block_ms: int) -> dict[str, list[StoredEvent]]:
        """Events with seq > positions[id] for any of the logs, waiting up to `block_ms` for the
        first one to arrive (one blocking read for every log a process follows)."""

    # -- conversations -----------------------------------------------------------------------
    async def create_conversation(self, tenant: str, conversation: dict[str, Any],
                                  items: Sequence[Item], *, ttl: int) -> None:
        """Raises QuotaExceeded, writing nothing, when the tenant holds its storage budget."""

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        ...

    async def update_conversation(self, tenant: str, conversation_id: str,
                                  metadata: dict[str, str] | None, *,
                                  ttl: int) -> dict[str, Any] | None: ...

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool: ...

    async def add_conversation_items(self, tenant: str, conversation_id: str,
                                     items: Sequence[Item], *, ttl: int,
                                     bounded: bool = True) -> bool:
        """Append items (in order). False if the conversation is unknown. Raises
        InvalidRequest if the conversation would exceed MAX_CONVERSATION_ITEMS, and (when
        `bounded`; a turn's own append is not) QuotaExceeded when the tenant already holds its
        storage budget; either way nothing is written."""

    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None, limit: int,
        order: str,
    ) -> ItemPage | None:
        """A page in `order` ("asc" oldest first, "desc" newest first), starting after the item
        `after` (absent = from the start). None if the conversation is unknown; an unknown
        `after` id gives an empty page."""

    async def all_conversation_items(self, tenant: str,
                                     conversation_id: str) -> list[Item] | None:
        """Every item, oldest first (the history a new turn sees)."""

    async def get_conversation_item(self, tenant: str, conversation_id: str,
                                    item_id: str) -> Item | None: ...

    async def delete_conversation_item(self, tenant: str, conversation_id: str,
                                       item_id: str) -> bool: ...


# -- background jobs --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Job:
    """One queue entry: a background response to run. `spec` is the job's JSON (the chat
    request and what the worker needs to run it), opaque to the queue."""

    entry_id: str  # the queue's own id for the entry (a Redis stream id)
    response_id: str
    spec: bytes


# What `JobQueue.enqueue` did: queued the jobs; refused them because the key holds its share of
# the queue (`limit`); refused them because the whole queue is full (`total`).
Enqueued = Literal["queued", "key_full", "queue_full"]


class Room(NamedTuple):
    """What is left of one key's share of the job queue, and of the whole queue."""

    key: int
    queue: int


class JobQueue(Protocol):
    """The background job queue, shared by every instance and fair between client keys: each
    key's jobs wait in its own sub-queue, and `take` serves the keys in turn (store/jobqueue.py).
    A taken entry stays pending (owned by the worker that took it) until `done`; an owner
    keeps its entries fresh with `keep_alive`; entries left idle too long (their worker died)
    are taken over with `reclaim`. Cancellation is broadcast on a channel."""

    async def enqueue(self, owner: str, jobs: Sequence[tuple[str, bytes]], *, limit: int,
                      total: int) -> Enqueued:
        """Queue `jobs` ((response id, spec) pairs) for the key `owner` (its tenant), all or
        none: none when the key would hold more than `limit` jobs (queued + running), or the
        whole queue more than `total`. Atomic: concurrent enqueues never pass either bound."""

    async def room(self, owner: str, *, limit: int, total: int) -> Room:
        """How many jobs `owner` could queue now, by its share and by the whole queue's bound
        (a hint for a batch: a concurrent enqueue may take the room first; `enqueue` is what
        decides)."""

    async def take(self, consumer: str, count: int, *, block_ms: int) -> list[Job]:
        """Up to `count` jobs no consumer has taken yet, now owned by `consumer`, one per key
        in turn; waits up to `block_ms` for one when there is none (0: do not wait)."""

    async def keep_alive(self, consumer: str, entry_ids: Sequence[str]) -> list[str]:
        """Reset the idle time of those entries that `consumer` still owns (one another
        worker has reclaimed meanwhile is left alone); return the ids it no longer owns (the
        worker was presumed dead: it must stop those jobs and leave them alone). One round
        trip."""

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Job]:
        """Take over up to `count` entries idle for at least `min_idle_ms` (their owner stopped
        keeping them alive): they are now owned by `consumer`."""

    async def done(self, entry_id: str) -> None:
        """Remove a finished entry (acknowledged and deleted: the queue length is the number
        of live jobs)."""

    async def requeue(self, job: Job) -> None:
        """Put a taken, never-started job back at the front of its key's sub-queue, atomically
        with removing its entry (a stopping worker hands it back)."""

    async def length(self) -> int:
        """Entries in the queue: queued + running."""

    async def publish_cancel(self, response_id: str) -> None:
        """Tell every worker that `response_id` was cancelled."""

    def cancels(self) -> AsyncIterator[str]:
        """Response ids as `publish_cancel` announces them, for as long as the caller reads.
        Raises StoreUnavailable when the subscription breaks (the caller subscribes again)."""

    async def statuses(self, response_ids: Sequence[str]) -> dict[str, str | None]:
        """The stored status of each response (None: unknown), in one round trip."""
