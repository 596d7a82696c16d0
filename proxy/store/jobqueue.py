"""`RedisJobQueue`: the background job queue (`JobQueue`, store/base.py), fair between client keys.

Layout (keys.py "background jobs", every key in the `{queue}` slot):
- each key (tenant) has a sub-queue of its queued jobs: fields `<tenant> <n>` of one hash, n
  running from the key's head to its tail (both in the `owners` hash);
- keys with queued jobs wait in two lists: `new` (keys that had nothing queued until their last
  enqueue) and `old` (keys served at least once since), each key in exactly one of them;
- the stream `jobs:{queue}`, read through one consumer group, holds the jobs being run: `take`
  moves the next key's oldest job into it and delivers it in the same script. An entry carries
  `r` (the response id), `s` (the job's spec, opaque bytes) and `k` (its key);
- `run`: each key's running entry ids, so its share counts them.
Cancellations go out on the `jobs:cancel` pub/sub channel. The atomic steps are scripts in
scripts.py; each declares every key it touches (a cluster moving the slot checks only those).

Invariants:
- Fairness: `take` serves one job per key in turn: first the new keys in arrival order, then
  the old ones round robin. A key that starts queueing waits for at most the keys that became
  ready before it (one job each), never for another key's backlog: with W jobs running, its
  first job starts within about one job length plus one job of each key ahead of it.
- Bounds, checked and written in one script: one key's queued + running jobs stay within
  `limit` (`--max-queued-jobs`), the whole queue's within `total` (`--max-queued-jobs-total`).
  `enqueue` is all or none: a batch either fits or nothing of it is queued. Nothing expires;
  these bounds keep Redis bounded instead. A key's running count is checked against the stream
  before it refuses, so an entry removed by anything else (an older release's worker, a lost
  stream) never shuts a key out.
- The stream holds running jobs only (and entries an older release queued there, which `take`
  delivers first, in their order): `done` and `requeue` remove them (XACK + XDEL). `requeue`
  puts the job back at the front of its key's sub-queue.
- An entry has one owner at a time: XREADGROUP hands it to one consumer, `reclaim` (XAUTOCLAIM)
  moves it only once it has been idle `min_idle_ms`, and `keep_alive` refreshes only entries
  the caller still owns (checked and claimed in one script): a worker that was presumed dead
  never takes back an entry another worker reclaimed. So crash recovery, heartbeats and the
  worker's queued -> in_progress compare-and-set work on delivered entries exactly as they did
  when every job waited in the stream.
- The consumer group is made on demand. `take` creates it (with the stream, from id 0) in its
  script when its first read finds it missing, before writing anything; `keep_alive` and
  `reclaim` create it and run once more (Redis refused the command before it did anything).
- Every failure of the server becomes `StoreUnavailable` (redis.py's `store_errors`). Reads
  (the length, the status poll) are retried once on a dropped connection, writes never. A take
  counts as a write: an entry delivered in a reply we never read stays pending under our name
  and comes back through `reclaim` once idle.
- `take` never blocks longer than `max_block_ms` (below the socket timeout, see factory.py):
  with nothing to take it waits on the wake-up list (BLPOP, bounded) that `enqueue` and
  `requeue` push to, then takes once more.
- One round trip per call (one command, script or pipeline); `keep_alive` and `statuses` with
  nothing to do make none. Rare extras: a take that waits (the wait and one more take), one to
  remove entries delivered without their fields, two to create a missing group.
- Rolling upgrade: entries an older release queued into the stream are delivered first, run and
  finished like any other (they count for no key); an older release's worker only ever reads
  undelivered stream entries, so it never takes a job queued here before it was delivered, and
  such jobs wait for a worker of this release (upgrade workers no later than the instances
  that queue). One it reclaims and finishes its own way leaves its id in `run`, which the
  key's next refusal checks and drops.

Deliberate divergence: fakeredis answers XREADGROUP on a missing stream with "ERR The XGROUP
subcommand requires the key to exist" where Redis answers NOGROUP; both mean "create the group".
Its Lua (lupa) also shapes XREADGROUP's reply differently (scripts.py TAKE_JOBS reads both).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis import exceptions as rex
from redis.asyncio import Redis

from proxy.store import keys
from proxy.store.base import Enqueued, Job, Room
from proxy.store.lua import scripts
from proxy.store.redis import read_retrying, store_errors

T = TypeVar("T")

# How long one wait for a cancel message lasts. Any value works (each wait is a real socket wait,
# not a poll); a bounded one lets redis-py run its connection health check between waits.
CANCEL_WAIT_SECONDS = 1.0

# A group command on a stream or group that does not exist (the second: fakeredis, see above).
_MISSING_GROUP = ("NOGROUP", "The XGROUP subcommand requires the key to exist")

# What the enqueue script answers, as the protocol says it.
_ENQUEUED: dict[int, Enqueued] = {1: "queued", 0: "key_full", -1: "queue_full"}

_FIELD_RESPONSE = keys.F_JOB_RESPONSE.encode()
_FIELD_SPEC = keys.F_JOB_SPEC.encode()


class RedisJobQueue:
    """The `JobQueue` protocol on a Redis client, usually the store's (factory.job_queue)."""

    def __init__(self, client: Redis, *, max_block_ms: int) -> None:
        self._client = client
        self._max_block_ms = max_block_ms
        self._enqueue = client.register_script(scripts.ENQUEUE_JOBS)
        self._room = client.register_script(scripts.ROOM_FOR_JOBS)
        self._take = client.register_script(scripts.TAKE_JOBS)
        self._keep_alive = client.register_script(scripts.KEEP_ALIVE_JOBS)
        self._finish = client.register_script(scripts.FINISH_JOBS)
        self._requeue = client.register_script(scripts.REQUEUE_JOB)
        # Where the next `reclaim` resumes its walk of the pending list. XAUTOCLAIM examines at
        # most 10 x COUNT entries per call, so restarting from 0-0 every time would only ever
        # see the oldest ones: the long-running, kept-alive jobs. Resuming walks the whole list
        # over successive calls (Redis answers 0-0 at its end: start over).
        self._reclaim_from = "0-0"

    # -- queueing --------------------------------------------------------------------------

    async def enqueue(self, owner: str, jobs: Sequence[tuple[str, bytes]], *, limit: int,
                      total: int) -> Enqueued:
        if not jobs:
            return "queued"
        args: list[Any] = [owner, limit, total]
        for response_id, spec in jobs:
            args += [response_id, spec]
        with store_errors():
            answer = await self._enqueue(keys=list(keys.JOB_KEYS), args=args)
        return _ENQUEUED[int(answer)]

    async def room(self, owner: str, *, limit: int, total: int) -> Room:
        with store_errors():
            mine, everyone = await self._room(keys=list(keys.JOB_KEYS),
                                              args=[owner, limit, total])
        return Room(key=max(0, int(mine)), queue=max(0, int(everyone)))

    async def requeue(self, job: Job) -> None:
        # Like `done`, needs no group: XACK answers 0 where there is none.
        args: list[Any] = [keys.JOB_GROUP, job.entry_id, job.response_id, job.spec]
        with store_errors():
            await self._requeue(keys=list(keys.JOB_KEYS), args=args)

    async def done(self, entry_id: str) -> None:
        await self._remove([entry_id])

    async def length(self) -> int:
        async def count() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hlen(keys.JOB_WAITING)
                pipe.xlen(keys.JOB_QUEUE)
                return await pipe.execute()

        queued, running = await self._read(count)
        return int(queued) + int(running)

    # -- ownership -------------------------------------------------------------------------

    async def take(self, consumer: str, count: int, *, block_ms: int) -> list[Job]:
        if count <= 0:
            return []
        jobs = await self._take_now(consumer, count)
        block = min(block_ms, self._max_block_ms)
        if jobs or block <= 0:
            return jobs
        with store_errors():
            woken = await self._client.blpop([keys.JOB_WAKE], timeout=block / 1000)
        if woken is None:
            return []
        return await self._take_now(consumer, count)

    async def _take_now(self, consumer: str, count: int) -> list[Job]:
        with store_errors():
            reply: Any = await self._take(keys=list(keys.JOB_KEYS),
                                          args=[keys.JOB_GROUP, consumer, count])
        entries = [(entry_id, _fields(flat)) for entry_id, flat in reply or ()]
        return await self._jobs(entries)

    async def keep_alive(self, consumer: str, entry_ids: Sequence[str]) -> list[str]:
        if not entry_ids:
            return []
        args: list[Any] = [keys.JOB_GROUP, consumer, *entry_ids]
        lost: Any = await self._grouped(
            lambda: self._keep_alive(keys=[keys.JOB_QUEUE], args=args))
        return [entry.decode() if isinstance(entry, bytes) else str(entry) for entry in lost]

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Job]:
        if count <= 0:
            return []
        reply: Any = await self._grouped(lambda: self._client.xautoclaim(
            keys.JOB_QUEUE, keys.JOB_GROUP, consumer, min_idle_ms,
            start_id=self._reclaim_from, count=count))
        # [next cursor, claimed entries, ids deleted from the stream]; Redis 7 has already
        # dropped the deleted ones from the pending list, so only the cursor and the claimed
        # entries matter here.
        self._reclaim_from = reply[0].decode()
        return await self._jobs(reply[1])

    # -- cancellation and status -----------------------------------------------------------

    async def publish_cancel(self, response_id: str) -> None:
        with store_errors():
            await self._client.publish(keys.JOB_CANCEL_CHANNEL, response_id)

    async def cancels(self) -> AsyncGenerator[str, None]:
        # A subscription holds a connection of its own (the pool lends one) until closed.
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            with store_errors():
                await pubsub.subscribe(keys.JOB_CANCEL_CHANNEL)
            while True:
                with store_errors():
                    message = await pubsub.get_message(timeout=CANCEL_WAIT_SECONDS)
                if message is not None and message["type"] == "message":
                    yield message["data"].decode()
        finally:
            # Gives the connection back (closed: a subscribed one is no use to anyone else).
            # redis-py leaves `aclose` unannotated.
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def statuses(self, response_ids: Sequence[str]) -> dict[str, str | None]:
        ids = list(response_ids)
        if not ids:
            return {}

        async def fetch() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for response_id in ids:
                    pipe.hget(keys.response(response_id), keys.F_STATUS)
                return await pipe.execute()

        values = await self._read(fetch)
        return {rid: None if value is None else value.decode()
                for rid, value in zip(ids, values, strict=True)}

    # -- plumbing --------------------------------------------------------------------------

    async def _jobs(self, entries: Sequence[tuple[bytes | None, dict[bytes, bytes] | None]],
                    ) -> list[Job]:
        """Jobs from delivered entries. An entry without its fields (deleted between delivery
        and read, or not written by `enqueue`) can never run: it is removed, not returned."""
        jobs: list[Job] = []
        broken: list[str] = []
        for entry_id, fields in entries:
            if entry_id is None:
                continue  # nothing left to remove
            response_id = (fields or {}).get(_FIELD_RESPONSE)
            spec = (fields or {}).get(_FIELD_SPEC)
            if response_id is None or spec is None:
                broken.append(entry_id.decode())
            else:
                jobs.append(Job(entry_id=entry_id.decode(), response_id=response_id.decode(),
                                spec=spec))
        if broken:
            await self._remove(broken)
        return jobs

    async def _remove(self, entry_ids: Sequence[str]) -> None:
        # No group needed: XACK answers 0 for a missing stream or group (after a restart, a
        # finished job's entry is simply gone).
        args: list[Any] = [keys.JOB_GROUP, *entry_ids]
        with store_errors():
            await self._finish(keys=list(keys.JOB_KEYS), args=args)

    async def _grouped(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a command that needs the consumer group; if the group is missing, create it and
        run the command once more (Redis refused it before doing anything)."""
        with store_errors():
            try:
                return await op()
            except rex.ResponseError as exc:
                if not str(exc).startswith(_MISSING_GROUP):
                    raise
            await self._create_group()
            return await op()

    async def _create_group(self) -> None:
        try:
            await self._client.xgroup_create(keys.JOB_QUEUE, keys.JOB_GROUP, id="0",
                                              mkstream=True)
        except rex.ResponseError as exc:
            # Another worker created it first: just as good.
            if not str(exc).startswith("BUSYGROUP"):
                raise

    async def _read(self, op: Callable[[], Awaitable[T]]) -> T:
        return await read_retrying(op)  # the store's read policy (redis.py)


def _fields(flat: Sequence[bytes] | None) -> dict[bytes, bytes] | None:
    """An entry's fields from a script's flat reply (field, value, field, value...)."""
    if not flat:
        return None
    return dict(zip(flat[::2], flat[1::2], strict=True))
