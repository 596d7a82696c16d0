"""Background responses: submitting a job, and cancelling one from any instance.

Submit (`background: true`): the response is stored `queued` together with the first two
events of its log (`response.created` and `response.queued`, both status queued), then put on
the job queue under its key (tenant); a key at its share of the queue, or a full queue, answers
429 with Retry-After (shares.py) and leaves nothing behind. A streaming client then
reads the log like any replay: the same events, live, from whichever instance it is on.

Cancel (docs/contract.md): only background responses; queued/in_progress → `cancelled` by one
compare-and-set, final from then on (a late completion never overwrites it):
- from `queued`: no worker holds it (a worker must win `queued → in_progress` first), so this
  instance closes its log with the terminal `response.cancelled` event itself;
- from `in_progress`: the owning worker is told (pub/sub, with a status poll as backup); it stops
  its upstream stream and closes the log with the partial output.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import orjson

from proxy.core import types as t
from proxy.core.errors import InvalidRequest, ProxyError, response_not_found
from proxy.core.types import ResponseObject
from proxy.services.eventlog.pages import whole_log
from proxy.services.generation.spec import JobSpec
from proxy.services.jobs.shares import QueueShare, refused
from proxy.settings import JobSettings, StoreSettings
from proxy.store.base import JobQueue, ResponseRecord, Store, StoredEvent

# A status may move between our read and our compare-and-set (a worker starts the job); a
# cancel re-reads and tries again, at most this many times.
CANCEL_ATTEMPTS = 3


class LocalWorker(Protocol):
    """This process's own worker (services/jobs/runner.py `Worker`), as submit and cancel see it."""

    def poke(self) -> None: ...

    def cancel_local(self, response_id: str) -> None: ...


class Background:
    def __init__(self, store: Store, queue: JobQueue, lifetimes: StoreSettings,
                 jobs: JobSettings, *, worker: LocalWorker | None = None) -> None:
        self._store, self._queue, self._lifetimes = store, queue, lifetimes
        self._share = QueueShare.of(jobs)
        # This process's own worker, if any: told at once (no polling, no broadcast delay).
        # Built before us (it needs nothing of ours), so nothing is attached afterwards.
        self._worker = worker

    async def submit(self, record: ResponseRecord, input_items: list[dict[str, Any]],
                     events: list[StoredEvent], spec: JobSpec) -> None:
        await self._store.create_response(record, input_items, events=events,
                                          ttl=self._lifetimes.response_ttl,
                                          event_ttl=self._lifetimes.event_ttl)
        try:
            answer = await self._queue.enqueue(record.tenant, [(record.id, spec.to_json())],
                                               limit=self._share.per_key,
                                               total=self._share.total)
        except ProxyError:
            # Not queued: do not leave a response behind that would stay `queued` for ever.
            with contextlib.suppress(ProxyError):
                await self._store.delete_response(record.tenant, record.id)
            raise
        if answer != "queued":
            await self._store.delete_response(record.tenant, record.id)
            raise refused(answer, self._share, "background response")
        if self._worker is not None:
            self._worker.poke()

    async def cancel(self, tenant: str, response_id: str) -> ResponseObject:
        for _ in range(CANCEL_ATTEMPTS):
            record = await self._store.get_response(tenant, response_id)
            if record is None:
                raise response_not_found(response_id)
            if not record.background:
                raise InvalidRequest("Only responses created with background=true can be "
                                     "cancelled.", param="response_id")
            if record.status == t.S_CANCELLED:
                return record.response
            if record.status in t.TERMINAL_STATUSES:
                raise InvalidRequest(f"Cannot cancel a response whose status is "
                                     f"'{record.status}'.", param="response_id")
            cancelled = {**record.response, "status": t.S_CANCELLED}
            moved = await self._store.transition(
                response_id, tenant=tenant, allowed_from=frozenset({record.status}),
                to=t.S_CANCELLED, response=cancelled, ttl=self._lifetimes.response_ttl)
            if not moved.changed:
                continue  # it moved meanwhile: look again
            if record.status == t.S_QUEUED:
                await self._close_queued(tenant, cancelled)
            else:
                if self._worker is not None:
                    self._worker.cancel_local(response_id)
                await self._queue.publish_cancel(response_id)
            return moved.response or cancelled
        raise InvalidRequest("The response changed status while it was being cancelled; "
                             "try again.", param="response_id")

    async def _close_queued(self, tenant: str, cancelled: ResponseObject) -> None:
        logged = await whole_log(self._store, cancelled["id"])
        seq = logged[-1].seq + 1 if logged else 0
        event = {"type": t.CANCELLED, "sequence_number": seq, "response": cancelled}
        terminal = StoredEvent(seq, t.CANCELLED, orjson.dumps(event))
        await self._store.finish_response(cancelled, terminal, tenant=tenant,
                                          ttl=self._lifetimes.response_ttl,
                                          event_ttl=self._lifetimes.event_ttl)
