"""The stored side of a turn: its events to the response's event log as they are made, its
end (the terminal event with the final object, retried and reconciled: durable.py) before the
caller sees it, then the conversation's new items. Owned by the event log's room: ending a
response that lost its writer (ending.py) records through the same `Recorder`."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import types as t
from proxy.core.types import Event, EventBatch, Item, ResponseObject
from proxy.services.eventlog.durable import append_conversation, store_final
from proxy.services.eventlog.writer import LogHandle
from proxy.store.base import Store, StoredEvent, Transition
from proxy.telemetry.tracing import Tracing


@dataclass
class ConversationTurn:
    """Where a finished turn's items go: the conversation, and this turn's input items."""

    tenant: str
    conversation_id: str
    input_items: Sequence[Item]


@dataclass
class Recorder:
    """The stored side of a turn. With a `log_handle`, every event goes to the response's event log;
    without one (a stored JSON request) only the final object is written."""

    store: Store
    tenant: str  # the response's owner: its final write counts its bytes in that key's ledger
    ttl: int
    event_ttl: int
    log_handle: LogHandle | None = None
    conversation: ConversationTurn | None = None
    stored: bool = True  # False: only a conversation keeps the turn (`store: false`)
    tracing: Tracing | None = None  # None: no span for the writes (proxy/telemetry/tracing.py)
    final: Transition | None = field(default=None, init=False)

    def add(self, events: list[Event], encoded: EventBatch) -> None:
        """A batch of the turn's events to its log (none without one). The turn's per-token
        path calls `log_handle.record` itself (a call a token fewer)."""
        handle = self.log_handle
        if handle is not None and events:  # (its numbers are checked by its last batch)
            handle.record(events, encoded)

    def finish(self, final: ResponseObject, terminal: StoredEvent | None,
               events: list[Event] | None = None,
               encoded: EventBatch | None = None) -> Coroutine[Any, Any, Transition]:
        """Store the end (retried, reconciled: services/eventlog/durable.py), then the
        conversation's new items. `events`/`encoded`: the batch's events before the terminal
        one, to the log with it (writer.py `LogHandle.finish`, instead of `add` then this). `final`
        is set only once the end is stored: a job is acknowledged on it. Traced: one span for
        the writes. Untraced, the coroutine of the writes itself (a frame less per stored
        answer's end)."""
        if self.tracing is None:
            return self._finish(final, terminal, events, encoded)
        return self._traced_finish(self.tracing, final, terminal, events, encoded)

    async def _traced_finish(self, tracing: Tracing, final: ResponseObject,
                             terminal: StoredEvent | None, events: list[Event] | None,
                             encoded: EventBatch | None) -> Transition:
        with tracing.store_span("finish_response"):
            return await self._finish(final, terminal, events, encoded)

    async def _finish(self, final: ResponseObject, terminal: StoredEvent | None,
                      events: list[Event] | None, encoded: EventBatch | None) -> Transition:
        if self.log_handle is not None:
            result = await self.log_handle.finish(final, terminal, tenant=self.tenant,
                                                  events=events or (), encoded=encoded)
        elif self.stored:
            result = await store_final(self.store, final, None, tenant=self.tenant,
                                       ttl=self.ttl, event_ttl=self.event_ttl)
        else:
            result = Transition(True, final)
        self.final = result
        turn = self.conversation
        if turn is not None and result.changed and final["status"] in (t.S_COMPLETED,
                                                                        t.S_INCOMPLETE):
            await append_conversation(
                self.store, turn.tenant, turn.conversation_id,
                [*turn.input_items, *final["output"]], ttl=self.ttl)
        return result
