"""The response as it is built: status, output, the open item, and how the response ends.

`ResponseState` is the half of the assembler that does not read chunks (assembler.py does):
opening and closing items, the MCP item waiting for the tool loop, the lifecycle and terminal
events, restore from a log. Every change of phase it makes goes through `Machine._to`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from proxy.core import types as t
from proxy.core.compaction import item_events as compaction_events
from proxy.core.events.assembler.hosteditems import HostedCallItem, ToolSearchCallItem
from proxy.core.events.assembler.item import ItemState, Numbering, OpenItem
from proxy.core.events.assembler.machine import Machine, Phase
from proxy.core.events.assembler.mcpitems import McpCallItem, McpListItem
from proxy.core.events.assembler.restore import restore
from proxy.core.events.steer import CLIENT_OWNED, STEERED
from proxy.core.events.summaries import wants_summaries
from proxy.core.ids import IdFactory
from proxy.core.translate.truncation import CONTEXT_LENGTH_EXCEEDED, is_context_overflow
from proxy.core.types import Event, Item, ResponseObject

_Opened = TypeVar("_Opened", bound=OpenItem)


class ResponseState(Machine):
    def __init__(self, response: ResponseObject, ids: IdFactory, clock: Callable[[], float],
                 seq: int, seal: Callable[[str], str] | None) -> None:
        super().__init__()
        # `response` holds the request echo plus id/object/created_at/model; we own the rest.
        self._base = response
        self._ids = ids
        self._clock = clock
        self._seq = Numbering(seq)
        self._seal = seal
        self.status = t.S_IN_PROGRESS
        self.output: list[Item] = []
        # The item streaming now (its kind is the phase), or the MCP item waiting for the
        # tool loop (Phase.TOOL); never both.
        self._open: OpenItem | None = None
        self._tool: McpCallItem | McpListItem | HostedCallItem | ToolSearchCallItem | None = None
        self.usage: dict[str, Any] | None = None
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._completed_at: int | None = None
        self.final: ResponseObject | None = None
        # Whole items made before the upstream call (a compaction, core/compaction.py): they
        # open the output, their events right after the start events.
        self._preface: list[Item] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, *, background: bool = False) -> list[Event]:
        """First events: created + in_progress, or created + queued for a background job."""
        # Both carry one response object, encoded once for both (core/events/encoding.py).
        if background:
            self.status = t.S_QUEUED
            response = self.snapshot()
            return [self._lifecycle(t.CREATED, response), self._lifecycle(t.QUEUED, response)]
        response = self.snapshot()
        return [self._lifecycle(t.CREATED, response), self._lifecycle(t.IN_PROGRESS, response),
                *self._prefaced()]

    def preface(self, item: Item) -> None:
        """A compaction item made before the upstream call (core/compaction.py): first in the
        output, its events right after the start events. Foreground only: a background job's
        worker builds its own assembler (compaction is refused with `background`)."""
        self._preface.append(item)

    def _prefaced(self) -> list[Event]:
        events: list[Event] = []
        for item in self._preface:
            events += compaction_events(item, len(self.output), self._seq.take)
            self.output.append(item)
        self._preface = []
        return events

    def resume(self) -> list[Event]:
        """A queued background job starts running."""
        self.status = t.S_IN_PROGRESS
        return [self._lifecycle(t.IN_PROGRESS)]

    def restore(self, events: Iterable[Event]) -> None:
        """Pick a response up from its event log (restore.py) on a fresh assembler; `fail()`
        or `cancel()` then closes it exactly as a live stream would."""
        state = restore(events, self._seq, self._seal,
                        summaries=wants_summaries(self._base))
        self.output += state.output
        if state.in_progress:
            self.status = t.S_IN_PROGRESS
        self._open, self._tool = state.open, state.waiting
        if state.waiting is not None:
            self._to(Phase.TOOL)
        elif state.open is not None:
            self._to(state.open.kind)

    def snapshot(self) -> ResponseObject:
        """The Response object as it stands (the final one once DONE)."""
        if self.final is not None:
            return self.final
        out = dict(self._base)
        out["status"] = self.status
        out["error"] = self._error
        out["incomplete_details"] = self._incomplete
        out["output"] = list(self.output)
        out["usage"] = self.usage
        if self._completed_at is not None:
            out["completed_at"] = self._completed_at
        return out

    def fail(self, message: str, code: str | None = None) -> list[Event]:
        """`code` None: `server_error`, or the context's when the message says so (an
        upstream's words); a caller that knows the cause says it."""
        if self.phase is Phase.DONE:
            return []
        events: list[Event] = []
        self._close(events, t.S_INCOMPLETE)
        self._interrupt(events)
        if code is None:  # what Codex keys its context handling on
            code = CONTEXT_LENGTH_EXCEEDED if is_context_overflow(message) else "server_error"
        self._error = {"code": code, "message": message}
        return self._terminal(t.FAILED, events)

    def cancel(self) -> list[Event]:
        if self.phase is Phase.DONE:
            return []
        events: list[Event] = []
        self._close(events, t.S_INCOMPLETE)
        self._interrupt(events)
        return self._terminal(t.CANCELLED, events)

    def steered(self) -> list[Event]:
        """The response ends where a steer stopped it (a safe boundary: services/generation/
        run.py decides where): the open item closed as it stands (`incomplete`), then
        `incomplete` with reason `steered`, for a successor to continue from. A response that
        already holds calls of the client's tools (or an approval request) waits for their
        outputs instead: it completes, as the turn that made them would have."""
        if self.phase is Phase.DONE:
            return []
        events: list[Event] = []
        self._close(events, t.S_INCOMPLETE)
        self._interrupt(events)
        if any(item.get("type") in CLIENT_OWNED for item in self.output):
            self._completed_at = int(self._clock())
            return self._terminal(t.COMPLETED, events)
        self._incomplete = {"reason": STEERED}
        return self._terminal(t.INCOMPLETE, events)

    def _terminal(self, kind: str, events: list[Event]) -> list[Event]:
        self.status = t.STATUS_OF_TERMINAL[kind]
        self.final = None
        final = self.snapshot()
        self.final = final
        self._to(Phase.DONE)
        seq = self._seq
        number = seq.next  # `seq.take()`, inline (item.py `Numbering`)
        seq.next = number + 1
        events.append({"type": kind, "sequence_number": number, "response": final})
        return events

    def _lifecycle(self, kind: str, response: ResponseObject | None = None) -> Event:
        seq = self._seq
        number = seq.next  # `seq.take()`, inline (item.py `Numbering`)
        seq.next = number + 1
        return {"type": kind, "sequence_number": number,
                "response": self.snapshot() if response is None else response}

    # -- opening and closing items -------------------------------------------------------------
    def _begin(self, item: _Opened, events: list[Event]) -> _Opened:
        """`item` opens (the open one, if any, was closed first): its added events."""
        self._open = item
        self._to(item.kind)
        item.open(events)
        return item

    def _close(self, events: list[Event], status: str) -> bool:
        """The open item, if any, closes with `status`; True if instead it now waits for the
        tool loop (an MCP or hosted call whose arguments are whole)."""
        item = self._open
        if item is None:
            return False
        self._open = None
        final = item.close(status, events)
        if final is None:
            assert isinstance(item, McpCallItem | HostedCallItem | ToolSearchCallItem)
            self._tool = item
            self._to(Phase.TOOL)
            return True
        self._to(Phase.READY)
        self._done(item, final, events)
        return False

    def _done(self, item: ItemState, final: Item, events: list[Event]) -> None:
        self.output.append(final)
        events.append(item.done(final))

    def _interrupt(self, events: list[Event]) -> None:
        """A response ends (failed, cancelled) while a tool item waits: it ends incomplete."""
        item = self._tool
        if item is not None:
            self._tool = None
            self._done(item, item.interrupt(events), events)
