"""Picking a response up from its event log (its worker died mid-stream).

A fold over the logged events: items done stay done, the open one is rebuilt with its text so
far and how far its events went, an MCP or hosted item that waited waits again, and numbering
goes on after the last logged event. The assembler then closes what is open (`fail()` or `cancel()`)
exactly as a live stream would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from proxy.core import mcp
from proxy.core import types as t
from proxy.core.events.assembler.calls import CustomToolCallItem, FunctionCallItem
from proxy.core.events.assembler.hosteditems import (
    HostedCallItem,
    SearchOutputItem,
    ToolSearchCallItem,
)
from proxy.core.events.assembler.item import (
    ADDED,
    PART_DONE,
    STREAMING,
    TEXT_DONE,
    Numbering,
    OpenItem,
)
from proxy.core.events.assembler.logprobs import from_event
from proxy.core.events.assembler.mcpitems import McpApprovalItem, McpCallItem, McpListItem
from proxy.core.events.assembler.text import (
    MessageItem,
    ReasoningItem,
    SummarisedReasoningItem,
)
from proxy.core.hosted import kind_of_item
from proxy.core.tools import toolsearch
from proxy.core.types import Event, Item

# A reasoning item asked for with summaries streams its one part as a summary part
# (text.py SummarisedReasoningItem): its events move the item along like a content part's.
_DELTAS = frozenset({t.TEXT_DELTA, t.REASONING_DELTA, t.ARGS_DELTA, t.CUSTOM_INPUT_DELTA,
                     t.SUMMARY_DELTA})
_STAGE_AFTER = {t.PART_ADDED: STREAMING, t.TEXT_DONE: TEXT_DONE, t.REASONING_DONE: TEXT_DONE,
                t.ARGS_DONE: TEXT_DONE, t.PART_DONE: PART_DONE, t.CUSTOM_INPUT_DONE: TEXT_DONE,
                t.SUMMARY_PART_ADDED: STREAMING, t.SUMMARY_DONE: TEXT_DONE,
                t.SUMMARY_PART_DONE: PART_DONE}


@dataclass
class Restored:
    output: list[Item] = field(default_factory=list)
    open: OpenItem | None = None
    waiting: McpCallItem | McpListItem | HostedCallItem | ToolSearchCallItem | None = None
    in_progress: bool = False


def restore(events: Iterable[Event], seq: Numbering,
            seal: Callable[[str], str] | None, *, summaries: bool = False) -> Restored:
    """The state `events` leave; `seq` set to go on after the last of them. `summaries`: the
    request asked for reasoning summaries (its reasoning items stream a summary part)."""
    state = Restored()
    for event in events:
        seq.next = event["sequence_number"] + 1
        kind = event["type"]
        opened = state.open
        if kind == t.ITEM_ADDED and event["item"].get("type") in mcp.ITEM_TYPES:
            _reopen_mcp(state, event, seq)
        elif kind == t.ITEM_ADDED and (event["item"].get("type") == toolsearch.CALL
                                       or kind_of_item(event["item"].get("type")) is not None):
            state.waiting = _reopen_hosted(event["item"], event["output_index"], seq)
        elif (isinstance(state.waiting, HostedCallItem)
              and kind in state.waiting.hosted.event_types):
            state.waiting.started = True  # (in_progress, streamed, running, completed)
            state.waiting.ended = kind == state.waiting.hosted.events[2]
        elif kind == mcp.ARGS_DONE and isinstance(state.waiting, McpCallItem):
            state.waiting.parts = [event["arguments"]]
        elif kind == t.ITEM_ADDED:
            state.open = _reopen(event["item"], event["output_index"], seq, seal, summaries)
        elif kind in _DELTAS and opened is not None:
            opened.parts.append(event["delta"])
            if event.get("logprobs") and isinstance(opened, MessageItem):
                opened.logprobs = (opened.logprobs or []) + from_event(event["logprobs"])
        elif kind in _STAGE_AFTER and opened is not None:
            opened.stage = _STAGE_AFTER[kind]
        elif kind == t.ITEM_DONE:
            state.output.append(event["item"])
            state.open = state.waiting = None
        elif kind == t.IN_PROGRESS:
            state.in_progress = True
    return state


def _reopen(item: Item, index: int, seq: Numbering,
            seal: Callable[[str], str] | None, summaries: bool) -> OpenItem:
    """A message, reasoning item or call as its output_item.added left it (a call's
    arguments flow from the start; a text item's part is not open yet)."""
    kind = item.get("type")
    if kind in (t.FUNCTION_CALL, t.CUSTOM_TOOL_CALL):
        call = {"name": item.get("name", ""), "call_id": item.get("call_id", ""),
                "namespace": item.get("namespace")}
        if kind == t.FUNCTION_CALL:
            return FunctionCallItem(item["id"], index, seq, **call)
        custom = CustomToolCallItem(item["id"], index, seq, **call)
        custom.decoder = None  # its parts are the input deltas already sent
        return custom
    if kind == toolsearch.OUTPUT:
        return SearchOutputItem(item, index, seq)
    if kind == t.REASONING:
        shape = SummarisedReasoningItem if summaries else ReasoningItem
        return shape(item["id"], index, seq, ADDED, seal=seal)
    return MessageItem(item["id"], index, seq, ADDED)  # (any other kind closes as a message)


def _reopen_hosted(item: Item, index: int, seq: Numbering
                   ) -> HostedCallItem | ToolSearchCallItem:
    """A hosted call is added once its arguments are whole: reopened, it waits, as it did."""
    if item["type"] == toolsearch.CALL:
        return _reopen_search(item, index, seq)
    kind = kind_of_item(item["type"])
    assert kind is not None
    waiting = HostedCallItem(item["id"], index, seq, kind=kind, name=kind.name)
    waiting.added_sent = True
    waiting.restored = item
    return waiting


def _reopen_search(item: Item, index: int, seq: Numbering) -> ToolSearchCallItem:
    """A tool search's call is added once its arguments are whole: reopened, it waits (a
    server-run one; a client-run one is done in the same batch as its added)."""
    waiting = ToolSearchCallItem(item["id"], index, seq, name=toolsearch.TOOL_TYPE,
                                 call_id=item.get("call_id") or "",
                                 execution=str(item.get("execution") or "server"))
    waiting.added_sent = True
    waiting.restored = item
    return waiting


def _reopen_mcp(state: Restored, event: Event, seq: Numbering) -> None:
    """An MCP item reopened from a log: it waits (a call, a listing) as when it was cut; an
    approval request is open like any call."""
    item, index = event["item"], event["output_index"]
    if item["type"] == mcp.LIST_TOOLS:
        state.waiting = McpListItem(item["id"], index, seq, item["server_label"])
    elif item["type"] == mcp.APPROVAL_REQUEST:
        state.open = McpApprovalItem(item["id"], index, seq, label=item["server_label"],
                                     name=item["name"])
    else:
        state.waiting = McpCallItem(item["id"], index, seq, label=item["server_label"],
                                    name=item["name"],
                                    call_id=item.get("approval_request_id") or "")
