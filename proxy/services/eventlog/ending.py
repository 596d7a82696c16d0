"""Ending a response that no live turn will finish (its worker died, its instance lost the
lease, it was cancelled with its log open): the assembler picks it up from where its event log
stopped, ends it (`fail` or `cancel`), and the closing events and the final object are stored
together, as a turn's end is. Used by the worker's reclaim (services/jobs/runner.py) and the lease
sweep (services/eventlog/ownership.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from proxy.core.events.assembler import Assembler
from proxy.core.events.encoding import foreground_start
from proxy.core.ids import IdFactory
from proxy.core.types import Event
from proxy.services.eventlog.pages import whole_log
from proxy.services.eventlog.recorder import Recorder
from proxy.services.eventlog.writer import EventLogHub
from proxy.store.base import ResponseRecord, Store, StoredEvent


async def close_from_log(store: Store, hub: EventLogHub, record: ResponseRecord,
                         end: Callable[[Assembler], list[Event]], *, ids: IdFactory,
                         clock: Callable[[], float], response_ttl: int, event_ttl: int) -> None:
    """`end` (e.g. `lambda a: a.fail(reason)`) applied to the response restored from its log;
    a response that never logged (`record.logged` false) ends in its object only."""
    logged = await whole_log(store, record.id) if record.logged else []
    head: list[Event] = []
    if record.logged and not logged and not record.background:
        # A foreground stream whose writer held its start (writer.py `open(early=False)`) and
        # wrote nothing before it stopped: the start readers elsewhere made from the record
        # (services/responses/stored.py `_head`), logged here before the end, so the log is
        # whole and numbered as those readers saw it.
        head = [orjson.loads(data) for _seq, _kind, data
                in foreground_start(orjson.dumps(record.response))]
    assembler = Assembler(dict(record.response), ids=ids, clock=clock)
    assembler.restore([*(orjson.loads(e.data) for e in logged), *head])
    recorder = Recorder(store, record.tenant, ttl=response_ttl, event_ttl=event_ttl,
                        log_handle=hub.open(record.id) if record.logged else None)
    await record_all(recorder, [*head, *end(assembler)], logged=record.logged)


async def record_all(recorder: Recorder, events: list[dict[str, Any]], *,
                     logged: bool = True) -> None:
    """Write a short, complete run of events (the last one terminal) at once: all but the last
    to the log, the last with the final object."""
    encoded = [(e["type"], orjson.dumps(e)) for e in events]
    recorder.add(events[:-1], encoded[:-1])
    kind, data = encoded[-1]
    terminal = StoredEvent(events[-1]["sequence_number"], kind, data) if logged else None
    await recorder.finish(events[-1]["response"], terminal)
