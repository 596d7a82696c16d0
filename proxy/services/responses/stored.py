"""Stored responses: retrieve, delete, list input items, and replay the event stream.

Replay (`GET /v1/responses/{id}?stream=true[&starting_after=N]`), from any instance:
- a response with an event log (it was streamed, or runs in the background) replays its log
  from the store, then, while it still runs, tails it live until the terminal event: the same
  bytes, the same sequence numbers, as the client that started it saw (a running foreground
  stream's first two events, which its writer holds back, are made from the record's object
  while its log is empty: `_head`);
- a response without a log (stored from a JSON request), or whose log has expired, replays a
  valid sequence rebuilt from its final object (`core/events/replay.py`) once it has finished.
Without `starting_after` the whole log from `response.created` is sent: the SDK's
`responses.stream(response_id=…, starting_after=k)` filters on its side (docs/protocol.md §3.3.7).

A follower that sees nothing for `follow_idle` seconds re-reads the response: a queued or
background response goes on waiting (the job queue guarantees it ends); a foreground response
whose writer has gone quiet that long is presumed lost with its instance, and the replay ends.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from proxy.core import types as t
from proxy.core.errors import response_not_found
from proxy.core.events.encoding import foreground_start
from proxy.core.events.replay import events_from_response
from proxy.core.request.paging import PageRequest, list_body, paginate
from proxy.core.types import EventBatch, EventBatches, ResponseObject
from proxy.services.eventlog.follow import Followers, FollowInterrupted
from proxy.services.eventlog.ownership import Leases
from proxy.services.eventlog.pages import log_pages
from proxy.settings import StreamSettings
from proxy.store.base import ResponseRecord, Store, StoredEvent
from proxy.store.leases import LeaseState

# However a replay waits, it ends after this long (a bound on every loop).
MAX_REPLAY_SECONDS = 24 * 3600
# How often a replay of a response without a log re-reads it until it finishes.
POLL_SECONDS = 0.25


class StoredResponses:
    def __init__(self, store: Store, followers: Followers, streams: StreamSettings, *,
                 leases: Leases | None = None) -> None:
        # A foreground response whose writer's lease expired is closed when read
        # (services/eventlog/ownership.py).
        self.leases = leases
        self._store = store
        self._followers = followers
        self._streams = streams

    async def _load(self, tenant: str, response_id: str) -> ResponseRecord:
        record = await self._store.get_response(tenant, response_id)
        if record is None:
            raise response_not_found(response_id)
        if self.leases is not None:
            record, _ = await self.leases.check(record)
        return record

    async def get(self, tenant: str, response_id: str) -> ResponseObject:
        return (await self._load(tenant, response_id)).response

    async def delete(self, tenant: str, response_id: str) -> dict[str, Any]:
        if not await self._store.delete_response(tenant, response_id):
            raise response_not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def input_items(self, tenant: str, response_id: str,
                          page: PageRequest) -> dict[str, Any]:
        items = await self._store.input_items(tenant, response_id)
        if items is None:
            raise response_not_found(response_id)
        data, has_more = paginate(items, page)
        return list_body(data, has_more)

    async def replay(self, tenant: str, response_id: str,
                     after: int | None) -> EventBatches:
        """Checks the response exists (404 before any byte), then returns the stream: a page
        of the log per batch, a live event per batch while it is followed."""
        record = await self._load(tenant, response_id)
        return self.replay_record(record, -1 if after is None else after)

    async def replay_record(self, record: ResponseRecord, after: int) -> EventBatches:
        if record.logged:
            async for batch in self._from_log(record, after):
                yield batch
            return
        final = await self._wait_finished(record)
        if final is not None:
            async for batch in _rebuilt(final, after):
                yield batch

    async def _finished_log(self, record: ResponseRecord, after: int) -> EventBatches | None:
        """A finished response's log: no tail needed. A log that has expired before the object
        (event logs live shorter), or that has a gap (a flush given up while the store failed),
        is rebuilt from the final object; a whole one is sent page by page once it ends with
        its terminal event. One that does not yet was finished before its writer closed it (a
        cancel is recorded at once, the worker running the job writes the end it reaches): None,
        to be followed as a live one for that end."""
        count, last = await self._store.log_extent(record.id)
        if last is None or count != last.seq + 1:
            return _rebuilt(record.response, after)
        if last.type in t.TERMINAL_EVENTS:
            return _paged(self._store, record.id, after)
        return None

    async def _from_log(self, record: ResponseRecord, after: int) -> EventBatches:
        if record.status in t.TERMINAL_STATUSES:
            finished = await self._finished_log(record, after)
            if finished is not None:
                async for batch in finished:
                    yield batch
                return
        head = await self._head(record, after)
        if head:
            yield [(kind, data) for _seq, kind, data in head]
            after = head[-1][0]
        async for batch in self._followed(record, after):
            yield batch

    async def _followed(self, record: ResponseRecord, after: int) -> EventBatches:
        """A running response's log from `after`: stored, then live until its terminal event
        (or until it is deleted, or its writer is gone)."""
        deadline = time.monotonic() + MAX_REPLAY_SECONDS
        position = after
        while time.monotonic() < deadline:
            try:
                async for event in self._followers.follow(record.id, after=position,
                                                          idle=self._streams.follow_idle):
                    yield [(event.type, event.data)]
                    position = event.seq
                    if event.type in t.TERMINAL_EVENTS:
                        return
            except FollowInterrupted:
                pass  # the tail lost the store: the read below says whether it is back
            # A store still down raises here: the stream is cut, never ended as if complete.
            current = await self._store.get_response(record.tenant, record.id)
            if current is None:
                return  # deleted or expired meanwhile
            if current.status in t.TERMINAL_STATUSES:
                # Finished while this follower was not fed: the rest, its end at least.
                async for batch in self._rest(current, position):
                    yield batch
                return
            if await self._writer_gone(current):
                return

    async def _head(self, record: ResponseRecord, after: int) -> list[tuple[int, str, bytes]]:
        """A running foreground stream's start, made from its record while its log is empty:
        its writer holds the first events back (services/eventlog/writer.py `open(early=False)`),
        and the record's object is the create-time one they carry until the final write. The
        log, once written, holds these same bytes (the final write compares them with that
        object to keep them by reference: store/lua/references.py); the follow then reads past
        them. A background job's start is logged with its create: nothing to make."""
        if after >= 1 or record.background or record.status != t.S_IN_PROGRESS:
            return []
        _count, last = await self._store.log_extent(record.id)
        if last is not None:
            return []
        return [event for event in foreground_start(orjson.dumps(record.response))
                if event[0] > after]

    async def _writer_gone(self, current: ResponseRecord) -> bool:
        """After `follow_idle` of silence on an unfinished response: stop waiting?"""
        if current.status == t.S_QUEUED or current.background:
            return False  # the job queue guarantees it ends
        if self.leases is None:
            return True  # a foreground writer silent this long is gone with its instance
        _, lease = await self.leases.check(current)
        # absent: never leased, no way to tell, so presumed gone as before; held: the writer
        # lives (a slow upstream), wait on; expired: just closed, the next round reads its end
        return lease is LeaseState.ABSENT

    async def _rest(self, record: ResponseRecord, position: int) -> EventBatches:
        """What a follower at `position` still needs of a finished response. From the log when
        it is whole; when it is not (its writer gave a flush up, or the end was stored without
        its terminal event), the final object is the source of truth: its terminal event,
        numbered to follow `position`, so the client's sequence never skips a number."""
        count, last = await self._store.log_extent(record.id)
        # (A whole log whose end is not past `position`: numbered otherwise than what this
        # follower was sent, e.g. an earlier release ended the response from its log while this
        # one had made the start from the record (`_head`): its end, rebuilt, as for a gap.)
        if last is not None and count == last.seq + 1 and last.type in t.TERMINAL_EVENTS \
                and last.seq > position:
            async for batch in _paged(self._store, record.id, position):
                yield batch
            return
        terminal = events_from_response(record.response)[-1]
        terminal["sequence_number"] = position + 1
        yield [(terminal["type"], orjson.dumps(terminal))]

    async def _wait_finished(self, record: ResponseRecord) -> ResponseObject | None:
        """The final object of a response stored from a JSON request, once it is final."""
        deadline = time.monotonic() + self._streams.follow_idle * 4
        current: ResponseRecord | None = record
        while current is not None and current.status not in t.TERMINAL_STATUSES:
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_SECONDS)
            current = await self._store.get_response(record.tenant, record.id)
        return current.response if current is not None else None


async def _paged(store: Store, response_id: str, after: int) -> EventBatches:
    async for page in log_pages(store, response_id, after=after):
        yield _encoded(page)


def _encoded(page: list[StoredEvent]) -> EventBatch:
    return [(event.type, event.data) for event in page]


async def _rebuilt(final: ResponseObject, after: int) -> EventBatches:
    """The events rebuilt from a final object (core/events/replay.py), those after `after`: one
    batch
    (none when nothing is left)."""
    batch = [(event["type"], orjson.dumps(event)) for event in events_from_response(final)
             if event["sequence_number"] > after]
    if batch:
        yield batch
