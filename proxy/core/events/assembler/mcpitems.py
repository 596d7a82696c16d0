"""MCP items the proxy runs (core/mcp.py; the tool loop, services/generation/toolloop.py, does the
I/O).

A call the model makes of an MCP tool streams like any call until its arguments are whole;
then, instead of closing, it waits (`close` returns None): the assembler holds it in
Phase.TOOL until the loop ends it with the tool's result (`finish`). A listing waits from
its start. A response that ends while one waits (failed, cancelled) ends it `interrupt`ed.
An approval request is not run: it closes like any item, its arguments whole at the end.
"""

from __future__ import annotations

from typing import Any

from proxy.core import mcp
from proxy.core import types as t
from proxy.core.events.assembler.calls import CallItem
from proxy.core.events.assembler.item import ItemState, Numbering
from proxy.core.types import Event, Item


class McpCallItem(CallItem):
    """`call_id` here is the approval request it answers ("" when none)."""

    __slots__ = ("label",)

    def __init__(self, item_id: str, index: int, seq: Numbering, *, label: str, name: str,
                 call_id: str = "", call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_id=call_id, call_index=call_index)
        self.label = label

    def open(self, events: list[Event]) -> None:
        events.append(self.added(self.item("", status=t.S_IN_PROGRESS)))
        events.append(self.event(mcp.CALL_IN_PROGRESS))

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)
        events.append(self.event(mcp.ARGS_DELTA, delta=text))

    def close(self, status: str, events: list[Event]) -> Item | None:
        text = "".join(self.parts)
        if not self.parts:  # every done has a delta before it
            self.delta("", events)
        events.append(self.event(mcp.ARGS_DONE, arguments=text))
        if status == t.S_COMPLETED:
            return None  # whole: it waits for the tool loop
        # Cut short (a failure, a truncation): never run. Its item keeps the status it
        # always had here ("completed", the default); the failed event says what happened.
        events.append(self.event(mcp.CALL_FAILED))
        return self.item(text)

    def waiting(self) -> Item:
        """What the tool loop runs."""
        return {"type": mcp.CALL, "id": self.item_id, "server_label": self.label,
                "name": self.name, "arguments": "".join(self.parts)}

    def finish(self, output: str | None, error: Any, events: list[Event]) -> Item:
        """The tool loop ran it: its end event; the final item."""
        failed = error is not None
        final = self.item("".join(self.parts), status=t.S_FAILED if failed else t.S_COMPLETED,
                          output=output, error=error)
        events.append(self.event(mcp.CALL_FAILED if failed else mcp.CALL_COMPLETED))
        return final

    def interrupt(self, events: list[Event]) -> Item:
        events.append(self.event(mcp.CALL_FAILED))
        return self.item("".join(self.parts), status=t.S_INCOMPLETE)

    def item(self, arguments: str, *, status: str = t.S_COMPLETED,
             output: str | None = None, error: Any = None) -> Item:
        out: Item = {"id": self.item_id, "type": mcp.CALL, "status": status,
                     "arguments": arguments, "name": self.name, "server_label": self.label,
                     "output": output, "error": error}
        if self.call_id:
            out["approval_request_id"] = self.call_id
        return out


class McpApprovalItem(CallItem):
    """A call of a tool that needs the user's approval: an `mcp_approval_request`."""

    __slots__ = ("label",)

    def __init__(self, item_id: str, index: int, seq: Numbering, *, label: str, name: str,
                 call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_index=call_index)
        self.label = label

    def open(self, events: list[Event]) -> None:
        events.append(self.added(self.item("")))

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)  # its arguments come whole at its end

    def close(self, status: str, events: list[Event]) -> Item:
        return self.item("".join(self.parts))

    def item(self, arguments: str) -> Item:
        return {"id": self.item_id, "type": mcp.APPROVAL_REQUEST, "arguments": arguments,
                "name": self.name, "server_label": self.label}


class McpListItem(ItemState):
    """An `mcp_list_tools` item: the tools of the server `label`."""

    __slots__ = ("label",)

    def __init__(self, item_id: str, index: int, seq: Numbering, label: str) -> None:
        super().__init__(item_id, index, seq)
        self.label = label

    def open(self, events: list[Event]) -> None:
        events.append(self.added(mcp.list_tools_item(self.item_id, self.label, [])))
        events.append(self.event(mcp.LIST_IN_PROGRESS))

    def waiting(self) -> Item:
        return {"type": mcp.LIST_TOOLS, "id": self.item_id, "server_label": self.label}

    def finish(self, tools: list[dict[str, Any]], error: str | None,
               events: list[Event]) -> Item:
        events.append(self.event(mcp.LIST_FAILED if error else mcp.LIST_COMPLETED))
        return mcp.list_tools_item(self.item_id, self.label, tools, error)

    def interrupt(self, events: list[Event]) -> Item:
        events.append(self.event(mcp.LIST_FAILED))
        return mcp.list_tools_item(self.item_id, self.label, [], "interrupted")
