"""A hosted tool's call (core/hosted.py: web_search, ...) as the response shows it; the tool
loop (services/generation/toolloop.py) runs it. A tool search's call (`ToolSearchCallItem`,
below) goes the same way.

The model's function call streams upstream, but the client sees the tool's own item, which has
no arguments to stream: the fragments are kept silently, and once they are whole (`close`) the
item is added (`in_progress`, then a `streamed` field's delta and done: code_interpreter's code)
and waits in Phase.TOOL, like an MCP call. The loop then says it runs (`searching`,
`interpreting`) and ends it with the result (`finish`: completed event, the final item). A
response that ends while it waits (failed, cancelled) ends it `incomplete`; a call cut before
its arguments were whole is added and done `incomplete` at once, never run. Every
`in_progress` event has its `completed` one (the SDK knows no `failed` event for these items):
the item's `status` says how it ended.
"""

from __future__ import annotations

from proxy.core import types as t
from proxy.core.events.assembler.calls import CallItem
from proxy.core.events.assembler.item import Numbering, OpenItem
from proxy.core.events.assembler.machine import Phase
from proxy.core.hosted import HostedKind, HostedResult, final_item, streamed_events
from proxy.core.tools import toolsearch
from proxy.core.types import Event, Item


class HostedCallItem(CallItem):
    """`name`: the function name upstream (the loop answers the call under it); `call_id`: the
    model's own call id (the next turn's history pairs the answer with it)."""

    __slots__ = ("added_sent", "ended", "hosted", "restored", "started")

    def __init__(self, item_id: str, index: int, seq: Numbering, *, kind: HostedKind,
                 name: str, call_id: str = "", call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_id=call_id, call_index=call_index)
        self.hosted = kind
        self.added_sent = False
        self.started = False  # its in_progress event was sent
        self.ended = False  # its completed event was sent
        self.restored: Item | None = None  # its added item, when picked up from a log

    def open(self, events: list[Event]) -> None:
        pass  # added once its arguments are whole: the item shows them (its query)

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)

    def close(self, status: str, events: list[Event]) -> Item | None:
        self._add(events)
        if status == t.S_COMPLETED:
            return None  # whole: it waits for the tool loop
        return self.interrupt(events)

    def _add(self, events: list[Event]) -> None:
        if not self.added_sent:
            self.added_sent = True
            events.append(self.added(self.item(t.S_IN_PROGRESS)))
        if not self.started:
            self.started = True
            events.append(self.event(self.hosted.events[0]))
            for kind, fields in streamed_events(self.hosted, self.item(t.S_IN_PROGRESS)):
                events.append(self.event(kind, **fields))

    def waiting(self) -> Item:
        return {"type": self.hosted.item_type, "id": self.item_id, "kind": self.hosted.name,
                "name": self.name, "call_id": self.call_id, "arguments": "".join(self.parts)}

    def running(self, events: list[Event]) -> None:
        events.append(self.event(self.hosted.events[1]))

    def finish(self, result: HostedResult, events: list[Event]) -> Item:
        events.append(self.event(self.hosted.events[2]))
        return final_item(self.hosted, self.item_id, "".join(self.parts), result,
                          t.S_FAILED if result.failed else t.S_COMPLETED)

    def interrupt(self, events: list[Event]) -> Item:
        """Never ran: its completed event (every in_progress has one), the item incomplete."""
        self._add(events)  # (one picked up from a log may have logged its added event only)
        if not self.ended:
            events.append(self.event(self.hosted.events[2]))
        return self.item(t.S_INCOMPLETE)

    def item(self, status: str) -> Item:
        if self.restored is not None:
            return {**self.restored, "status": status}
        return final_item(self.hosted, self.item_id, "".join(self.parts), None, status)


class ToolSearchCallItem(CallItem):
    """The model's call of the search function (core/tools/toolsearch.py). Its item shows the
    arguments whole (an object), so the fragments are kept silently and the item is added
    once they are. A client-run search is then done: the client answers it. A server-run one
    waits in Phase.TOOL for the tool loop, which ends it and adds the `tool_search_output`
    (the assembler's `search_end`); a response that ends while it waits ends it
    `incomplete`. The SDK has no events of its own for these items: added and done only."""

    __slots__ = ("added_sent", "execution", "restored")

    def __init__(self, item_id: str, index: int, seq: Numbering, *, name: str,
                 call_id: str, execution: str, call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_id=call_id, call_index=call_index)
        self.execution = execution
        self.added_sent = False
        self.restored: Item | None = None  # its added item, when picked up from a log

    def open(self, events: list[Event]) -> None:
        pass  # added once its arguments are whole

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)

    def close(self, status: str, events: list[Event]) -> Item | None:
        self._add(events)
        if status == t.S_COMPLETED and self.execution == "server":
            return None  # whole: the tool loop runs it
        return self.item(status)

    def _add(self, events: list[Event]) -> None:
        if not self.added_sent:
            self.added_sent = True
            events.append(self.added(self.item(t.S_IN_PROGRESS)))

    def waiting(self) -> Item:
        return {"type": toolsearch.CALL, "id": self.item_id, "name": self.name,
                "call_id": self.call_id, "arguments": "".join(self.parts)}

    def interrupt(self, events: list[Event]) -> Item:
        self._add(events)
        return self.item(t.S_INCOMPLETE)

    def item(self, status: str) -> Item:
        if self.restored is not None:
            return {**self.restored, "status": status}
        return toolsearch.call_item(self.item_id, self.call_id, "".join(self.parts),
                                    self.execution, status)


class SearchOutputItem(OpenItem):
    """A `tool_search_output` picked up from a log between its added and its done (they go
    out together, but a log may end anywhere): it is whole from its added on."""

    __slots__ = ("whole",)
    kind = Phase.FUNCTION_CALL

    def __init__(self, item: Item, index: int, seq: Numbering) -> None:
        super().__init__(item["id"], index, seq)
        self.whole = item

    def open(self, events: list[Event]) -> None:
        pass

    def delta(self, text: str, events: list[Event]) -> None:
        pass

    def close(self, status: str, events: list[Event]) -> Item:
        return self.whole
