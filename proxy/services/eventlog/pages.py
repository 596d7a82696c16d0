"""Reading an event log in pages: `XRANGE ... COUNT`, never a whole long log in one reply.

A replay (or a follower catching up) holds one page at a time, so a 20,000-event log costs a
page of memory per reader, not the log; a reader that needs the whole log (restoring an
assembler) still reads it page by page, in bounded replies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from proxy.store.base import Store, StoredEvent

# Events per page, and log entries per XRANGE reply (an entry holds one event or a run of
# them, at most 8 KiB of events unless one is bigger: store/lua/packing.py): big enough that a
# typical answer is one or two round trips, small enough that a reply stays within 2 MiB.
READ_PAGE = 256


async def log_pages(store: Store, response_id: str, *, after: int,
                    page: int | None = None) -> AsyncIterator[list[StoredEvent]]:
    """The stored events with seq > after, page by page, until the log's current end."""
    page = page or READ_PAGE
    position = after
    while True:
        events = await store.read_events(response_id, after=position, limit=page)
        if events:
            yield events
            position = events[-1].seq
        if len(events) < page:
            return


async def whole_log(store: Store, response_id: str) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    async for part in log_pages(store, response_id, after=-1):
        events += part
    return events
