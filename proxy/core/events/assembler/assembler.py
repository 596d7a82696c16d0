"""The assembler: vLLM chat-completion chunks in, Responses stream events out.

An explicit state machine with one open item at a time:

    READY ──reasoning──▶ REASONING ─┐        (any kind switch closes the open item first and
      │  ──content────▶ MESSAGE ────┼─▶ ...   opens the next at output_index + 1)
      │  ──tool call──▶ FUNCTION_CALL┘
      └─ finish_reason ─▶ FINISHED (open item closed) ─ end() ─▶ DONE (terminal event)
       error frame / fail() / cancel() from any state ──────────▶ DONE

MCP tools run by the proxy (core/mcp.py, services/toolloop.py) add one state, TOOL: an
`mcp_list_tools` item, or an `mcp_call` whose arguments are whole, waits there (open, its
`output_item.done` not yet sent) while the tool loop does the I/O; `mcp_list_end` /
`mcp_call_end` close it, `next_turn()` takes the next upstream turn into the same response
(numbering goes on; usage is summed). A call closing ends the upstream turn (the rest is not
read, but for its usage), so items still never interleave. fail()/cancel() close a waiting
item too (`mcp_call.failed`, status incomplete).

Invariants (PROTOCOL.md §3.5; tests/unit/test_assembler_properties.py checks them):
- `sequence_number` is assigned when an event is made: 0, 1, 2, … with no gaps, never patched.
- `output_index` is dense from 0 and follows the order of `output_item.added`; items never
  interleave (parallel tool calls become sequential items).
- Every added has its done, in stack order; `done` text equals the joined deltas; each
  `output_item.done` item is the very object that ends up in the final `output`.
- Exactly one terminal event, last: completed (finish stop/tool_calls), incomplete (length,
  content_filter), failed (error frame, abort, a stream that ends without a finish), cancelled.

No I/O, no clock, no randomness inside: ids come from `ids`, time from `clock`.
Deliberate divergences from vLLM's own Responses server: `response.incomplete` (not `completed`
with status incomplete) on truncation, and `response.failed` on errors (PROTOCOL.md §5).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from proxy.core import ids as idp
from proxy.core import mcp
from proxy.core import types as t
from proxy.core.compaction import item_events as compaction_events
from proxy.core.custominput import InputStream
from proxy.core.ids import IdFactory
from proxy.core.summaries import summary_part, wants_summaries
from proxy.core.toolnames import ToolNames
from proxy.core.truncation import CONTEXT_LENGTH_EXCEEDED, is_context_overflow
from proxy.core.types import Chunk, Event, Item, ResponseObject


class Phase(enum.Enum):
    READY = "ready"
    REASONING = "reasoning"
    MESSAGE = "message"
    FUNCTION_CALL = "function_call"
    FINISHED = "finished"
    TOOL = "tool"  # an MCP item waits for the tool loop (services/toolloop.py) to run it
    DONE = "done"


_PHASE_OF_ITEM = {t.MESSAGE: Phase.MESSAGE, t.REASONING: Phase.REASONING,
                  t.FUNCTION_CALL: Phase.FUNCTION_CALL, t.CUSTOM_TOOL_CALL: Phase.FUNCTION_CALL}
_DELTAS = frozenset({t.TEXT_DELTA, t.REASONING_DELTA, t.ARGS_DELTA, t.CUSTOM_INPUT_DELTA})
_ADDED, _STREAMING, _TEXT_DONE, _PART_DONE = range(4)
_STAGE_AFTER = {t.PART_ADDED: _STREAMING, t.TEXT_DONE: _TEXT_DONE, t.REASONING_DONE: _TEXT_DONE,
                t.ARGS_DONE: _TEXT_DONE, t.PART_DONE: _PART_DONE,
                t.CUSTOM_INPUT_DONE: _TEXT_DONE}
# Where a restored reasoning item's summary part had got to (core/summaries.py).
_SUMMARY_STAGE_AFTER = {t.SUMMARY_PART_ADDED: _STREAMING, t.SUMMARY_DONE: _TEXT_DONE,
                        t.SUMMARY_PART_DONE: _PART_DONE}
_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
_EMPTY_LIST: list[Any] = []  # never mutated; shared to save an allocation per delta


def map_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage → Responses usage, every key the SDKs require present (PROTOCOL.md §1.1)."""
    if not usage:
        return None
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    input_tokens = int(usage.get("prompt_tokens") or 0)
    output_tokens = int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": int(prompt.get("cached_tokens") or 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": int(completion.get("reasoning_tokens") or 0)},
        "total_tokens": int(usage.get("total_tokens") or input_tokens + output_tokens),
    }


class _OpenItem:
    """The one item being streamed: its identity and the text gathered so far."""

    __slots__ = ("call_id", "call_index", "custom", "decoder", "index", "item_id", "kind",
                 "mcp", "name", "namespace", "parts", "stage", "summary", "summary_sent")

    def __init__(self, kind: Phase, item_id: str, index: int, stage: int = 1) -> None:
        self.kind = kind
        # How far its events went: _ADDED, _STREAMING (part open / arguments flowing),
        # _TEXT_DONE, _PART_DONE. Live items open at _STREAMING; restored ones anywhere.
        self.stage = stage
        self.item_id = item_id
        self.index = index
        self.parts: list[str] = []
        self.call_index: int | None = None
        self.call_id = ""
        self.name = ""
        # A call of a namespace member or a custom tool (core/tools.py): the name restored,
        # a custom tool's input decoded from its arguments as they come (none when restored
        # from a log: its `parts` are then the input deltas already sent).
        self.namespace: str | None = None
        self.custom = False
        self.decoder: InputStream | None = None
        # A reasoning item's summary part: its stage like `stage` (_ADDED: none opened), and
        # for a restored item the length of the summary text already sent (None: live, every
        # reasoning delta had its summary delta).
        self.summary = _ADDED
        self.summary_sent: int | None = None
        # A call of an MCP tool the proxy runs: (server_label, approval needed?); its item is
        # an `mcp_call` (or an `mcp_approval_request`) and `name` the MCP tool's own name.
        self.mcp: tuple[str, bool] | None = None


class _RoundOver(Exception):
    """An MCP call's arguments are complete: the rest of this upstream turn is not read (the
    tool loop runs the call and asks the model again), so items never interleave."""


class _PendingCall:
    """A tool call whose name has not arrived yet (some parsers send it late)."""

    __slots__ = ("args", "call_id", "index")

    def __init__(self, index: int, call_id: str | None) -> None:
        self.index = index
        self.call_id = call_id
        self.args: list[str] = []


class Assembler:
    def __init__(
        self,
        response: ResponseObject,
        *,
        ids: IdFactory,
        clock: Callable[[], float],
        seq: int = 0,
        seal_reasoning: Callable[[str], str] | None = None,
    ) -> None:
        # `response` holds the request echo plus id/object/created_at/model; we own the rest.
        self._base = response
        self._ids = ids
        self._clock = clock
        self._seq = seq
        self._seal = seal_reasoning
        self._names = ToolNames(response.get("tools") or ())
        self._summaries = wants_summaries(response)
        self.phase = Phase.READY
        self.status = t.S_IN_PROGRESS
        self.output: list[Item] = []
        self._open: _OpenItem | None = None
        self._pending: _PendingCall | None = None
        self._finish: str | None = None
        self.usage: dict[str, Any] | None = None
        # Output deltas since the last usage the upstream reported: what a turn cut before its
        # usage chunk still streamed (services/metering.py). One increment per chunk.
        self.deltas = 0
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._completed_at: int | None = None
        self.final: ResponseObject | None = None
        # Whole items made before the upstream call (a compaction, core/compaction.py): they
        # open the output, their events right after the start events.
        self._preface: list[Item] = []
        # MCP tools (core/mcp.py): upstream name → (server_label, tool name, approval?), set by
        # the tool loop once listed; the item waiting for it in Phase.TOOL; usage of the
        # upstream turns before this one (one response may take several).
        self._mcp: dict[str, tuple[str, str, bool]] = {}
        self._tool: _OpenItem | None = None
        self._usage_before: dict[str, Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def start(self, *, background: bool = False) -> list[Event]:
        """First events: created + in_progress, or created + queued for a background job."""
        if background:
            self.status = t.S_QUEUED
            return [self._lifecycle(t.CREATED), self._lifecycle(t.QUEUED)]
        return [self._lifecycle(t.CREATED), self._lifecycle(t.IN_PROGRESS), *self._prefaced()]

    def preface(self, item: Item) -> None:
        """A compaction item made before the upstream call (core/compaction.py): first in the
        output, its events right after the start events. Foreground only: a background job's
        worker builds its own assembler (compaction is refused with `background`)."""
        self._preface.append(item)

    def _prefaced(self) -> list[Event]:
        events: list[Event] = []
        for item in self._preface:
            events += compaction_events(item, len(self.output), self._take)
            self.output.append(item)
        self._preface = []
        return events

    def resume(self) -> list[Event]:
        """A queued background job starts running."""
        self.status = t.S_IN_PROGRESS
        return [self._lifecycle(t.IN_PROGRESS)]

    def restore(self, events: Iterable[Event]) -> None:
        """Pick a response up from its event log (its worker died mid-stream): items done stay
        done, the open one is reopened with its text so far, numbering goes on after the last
        logged event. `fail()` or `cancel()` then closes it exactly as a live stream would."""
        for event in events:
            self._seq = event["sequence_number"] + 1
            kind = event["type"]
            if kind == t.ITEM_ADDED and event["item"].get("type") in mcp.ITEM_TYPES:
                self._restore_mcp(event)
            elif kind == mcp.ARGS_DONE and self._tool is not None:
                self._tool.parts = [event["arguments"]]
            elif kind == t.ITEM_ADDED:
                item = event["item"]
                phase = _PHASE_OF_ITEM.get(item.get("type"), Phase.MESSAGE)
                stage = _STREAMING if phase is Phase.FUNCTION_CALL else _ADDED
                opened = _OpenItem(phase, item["id"], event["output_index"], stage)
                opened.call_id, opened.name = item.get("call_id", ""), item.get("name", "")
                opened.namespace = item.get("namespace")
                opened.custom = item.get("type") == t.CUSTOM_TOOL_CALL
                self._open, self.phase = opened, phase
            elif kind in _SUMMARY_STAGE_AFTER and self._open is not None:
                self._open.summary = _SUMMARY_STAGE_AFTER[kind]
                self._open.summary_sent = self._open.summary_sent or 0
            elif kind == t.SUMMARY_DELTA and self._open is not None:
                self._open.summary_sent = (self._open.summary_sent or 0) + len(event["delta"])
            elif kind in _DELTAS and self._open is not None:
                self._open.parts.append(event["delta"])
            elif kind in _STAGE_AFTER and self._open is not None:
                self._open.stage = _STAGE_AFTER[kind]
            elif kind == t.ITEM_DONE:
                self.output.append(event["item"])
                self._open, self._tool, self.phase = None, None, Phase.READY
            elif kind == t.IN_PROGRESS:
                self.status = t.S_IN_PROGRESS

    def _restore_mcp(self, event: Event) -> None:
        """An MCP item reopened from a log: it waits (a call, a listing) as when it was cut."""
        item = event["item"]
        opened = _OpenItem(Phase.TOOL, item["id"], event["output_index"])
        if item["type"] == mcp.LIST_TOOLS:
            opened.name = item["server_label"]
            self._tool, self.phase = opened, Phase.TOOL
            return
        opened.name = item["name"]
        opened.mcp = (item["server_label"], item["type"] == mcp.APPROVAL_REQUEST)
        opened.call_id = item.get("approval_request_id") or ""
        if item["type"] == mcp.APPROVAL_REQUEST:
            opened.kind = Phase.FUNCTION_CALL
            self._open, self.phase = opened, Phase.FUNCTION_CALL
        else:
            self._tool, self.phase = opened, Phase.TOOL

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

    # -- upstream chunks -------------------------------------------------------------------
    def feed(self, chunk: Chunk) -> list[Event]:
        if self.phase is Phase.DONE:
            return []
        if self.phase is Phase.TOOL:  # the rest of a turn whose MCP call waits: usage only
            self._usage(chunk.get("usage"))
            return []
        events: list[Event] = []
        try:
            return self._feed(chunk, events)
        except _RoundOver:
            return events

    def _feed(self, chunk: Chunk, events: list[Event]) -> list[Event]:
        error = chunk.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return self.fail(f"upstream error: {message or 'unknown error'}")
        usage = chunk.get("usage")
        if usage:
            self._usage(usage)
        choices = chunk.get("choices")
        if not choices:
            return events
        choice = choices[0]
        delta = choice.get("delta")
        if delta:
            self.deltas += 1
            reasoning = delta.get("reasoning")
            if reasoning is None:  # vLLM before PR #27752 named it reasoning_content
                reasoning = delta.get("reasoning_content")
            if reasoning:
                self._reasoning(reasoning, events)
            content = delta.get("content")
            if content:
                self._text(content, events)
            calls = delta.get("tool_calls")
            if calls:
                for call in calls:
                    self._tool_call(call, events)
        finish = choice.get("finish_reason")
        if finish:
            self._finish = finish
            self._close(events, t.S_INCOMPLETE if finish in _INCOMPLETE_REASONS else t.S_COMPLETED)
            self.phase = Phase.FINISHED
        return events

    def _usage(self, usage: dict[str, Any] | None) -> None:
        if usage:
            self.deltas = 0  # counted in the usage
            self.usage = map_usage(usage)
            if self._usage_before is not None:
                self.usage = add_usage(self._usage_before, self.usage)

    @property
    def turn_finished(self) -> bool:
        """The upstream turn sent its finish_reason (what follows is usage and the end)."""
        return self._finish is not None

    def end(self, *, finish: str | None = None) -> list[Event]:
        """The upstream stream is over (`[DONE]` or a clean end of body). `finish`: what the
        turn ended with if it sent no finish_reason (the tool loop cut it at an MCP call)."""
        if self.phase is Phase.DONE or self.phase is Phase.TOOL:
            return []
        finish = self._finish or finish
        if finish is None:
            return self.fail("upstream ended the stream before it finished")
        if finish == "abort":
            return self.fail("upstream aborted the request")
        if finish in _INCOMPLETE_REASONS:
            self._incomplete = {"reason": _INCOMPLETE_REASONS[finish]}
            return self._terminal(t.INCOMPLETE, [])
        if finish not in ("stop", "tool_calls"):
            return self.fail(f"upstream finished with {finish!r}")
        self._completed_at = int(self._clock())
        return self._terminal(t.COMPLETED, [])

    def fail(self, message: str, code: str = "server_error") -> list[Event]:
        if self.phase is Phase.DONE:
            return []
        events: list[Event] = []
        self._close(events, t.S_INCOMPLETE)
        self._end_tool(events)
        if code == "server_error" and is_context_overflow(message):
            code = CONTEXT_LENGTH_EXCEEDED  # what Codex keys its context handling on
        self._error = {"code": code, "message": message}
        return self._terminal(t.FAILED, events)

    def cancel(self) -> list[Event]:
        if self.phase is Phase.DONE:
            return []
        events: list[Event] = []
        self._close(events, t.S_INCOMPLETE)
        self._end_tool(events)
        return self._terminal(t.CANCELLED, events)

    # -- item kinds --------------------------------------------------------------------------
    def _reasoning(self, text: str, events: list[Event]) -> None:
        item = self._open
        if item is None or item.kind is not Phase.REASONING:
            item = self._begin(Phase.REASONING, idp.REASONING, events)
            events.append(self._event(t.ITEM_ADDED, output_index=item.index, item={
                "id": item.item_id, "type": t.REASONING, "summary": [], "content": [],
                "status": t.S_IN_PROGRESS,
            }))
            events.append(self._event(t.PART_ADDED, item_id=item.item_id, output_index=item.index,
                                      content_index=0, part={"type": t.REASONING_TEXT, "text": ""}))
            if self._summaries:
                item.summary = _STREAMING
                events.append(self._event(t.SUMMARY_PART_ADDED, item_id=item.item_id,
                                          output_index=item.index, summary_index=0,
                                          part=summary_part("")))
        item.parts.append(text)
        events.append({"type": t.REASONING_DELTA, "sequence_number": self._take(),
                       "item_id": item.item_id, "output_index": item.index, "content_index": 0,
                       "delta": text})
        if item.summary == _STREAMING:
            events.append({"type": t.SUMMARY_DELTA, "sequence_number": self._take(),
                           "item_id": item.item_id, "output_index": item.index,
                           "summary_index": 0, "delta": text})

    def _text(self, text: str, events: list[Event]) -> None:
        item = self._open
        if item is None or item.kind is not Phase.MESSAGE:
            item = self._begin(Phase.MESSAGE, idp.MESSAGE, events)
            events.append(self._event(t.ITEM_ADDED, output_index=item.index, item={
                "id": item.item_id, "type": t.MESSAGE, "status": t.S_IN_PROGRESS,
                "content": [], "role": "assistant",
            }))
            events.append(self._event(t.PART_ADDED, item_id=item.item_id, output_index=item.index,
                                      content_index=0, part=_output_text("")))
        item.parts.append(text)
        events.append({"type": t.TEXT_DELTA, "sequence_number": self._take(),
                       "item_id": item.item_id, "output_index": item.index, "content_index": 0,
                       "delta": text, "logprobs": _EMPTY_LIST})

    def _tool_call(self, call: dict[str, Any], events: list[Event]) -> None:
        index = call.get("index")
        if not isinstance(index, int):
            index = self._open.call_index if self._open and self._open.call_index is not None else 0
        function = call.get("function") or {}
        name = function.get("name")
        args = function.get("arguments")
        item = self._open
        if item is not None and item.kind is Phase.FUNCTION_CALL and item.call_index == index:
            if args:
                self._args(item, args, events)
            return
        pending = self._pending
        if pending is None or pending.index != index:
            pending = self._pending = _PendingCall(index, call.get("id"))
        elif call.get("id") and not pending.call_id:
            pending.call_id = call.get("id")
        if args:
            pending.args.append(args)
        if name:  # the item opens once its name is known (the SDK wants it on added)
            self._pending = None
            item = self._begin(Phase.FUNCTION_CALL, idp.FUNCTION_CALL, events)
            item.call_index = index
            item.call_id = pending.call_id or self._ids(idp.CALL)
            served = self._mcp.get(name) if self._mcp else None
            if served is not None:
                item.call_id = ""  # the model's call id stays upstream; the item id is ours
                self._open_mcp(item, served, events)
            else:
                target = self._names.target(name)
                item.name, item.namespace = target.name, target.namespace
                item.custom = target.custom
                if target.custom:
                    item.decoder = InputStream()
                events.append(self._event(t.ITEM_ADDED, output_index=item.index,
                                          item=_call_item(item, t.S_IN_PROGRESS, "")))
            for fragment in pending.args:
                self._args(item, fragment, events)

    def _args(self, item: _OpenItem, fragment: str, events: list[Event]) -> None:
        item.parts.append(fragment)
        if item.mcp is not None:
            if not item.mcp[1]:  # an approval request's arguments come whole at its end
                events.append(self._event(mcp.ARGS_DELTA, item_id=item.item_id,
                                          output_index=item.index, delta=fragment))
            return
        if item.custom:  # the input is the string inside the arguments: decoded as it comes
            text = item.decoder.feed(fragment) if item.decoder is not None else ""
            if text:
                events.append({"type": t.CUSTOM_INPUT_DELTA, "sequence_number": self._take(),
                               "item_id": item.item_id, "output_index": item.index,
                               "delta": text})
            return
        events.append({"type": t.ARGS_DELTA, "sequence_number": self._take(),
                       "item_id": item.item_id, "output_index": item.index, "delta": fragment})

    # -- opening and closing -------------------------------------------------------------------
    def _begin(self, kind: Phase, prefix: str, events: list[Event]) -> _OpenItem:
        self._close(events, t.S_COMPLETED)
        item = _OpenItem(kind, self._ids(prefix), len(self.output))
        self._open = item
        self.phase = kind
        return item

    def _close(self, events: list[Event], status: str) -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        self.phase = Phase.READY
        text = "".join(item.parts)
        where = {"item_id": item.item_id, "output_index": item.index}
        final: Item
        if item.mcp is not None:
            if self._close_mcp(item, text, status, events):
                raise _RoundOver
            final = _mcp_item(item, text)
        elif item.custom:
            final = self._close_custom(item, status, events)
        elif item.kind is Phase.FUNCTION_CALL:
            if item.stage == _STREAMING:
                if not item.parts:  # vLLM's pairing rule wants a delta before every done
                    self._args(item, "", events)
                events.append(self._event(t.ARGS_DONE, **where, arguments=text, name=item.name))
            final = _call_item(item, status, text)
        else:
            message = item.kind is Phase.MESSAGE
            part = _output_text(text) if message else {"type": t.REASONING_TEXT, "text": text}
            self._close_part(item, part, events)
            content = [part] if item.stage >= _STREAMING else []
            if message:
                final = {"id": item.item_id, "type": t.MESSAGE, "status": status,
                         "content": content, "role": "assistant"}
            else:
                final = {"id": item.item_id, "type": t.REASONING,
                         "summary": self._close_summary(item, text, events),
                         "content": content, "status": status}
                if self._seal is not None:
                    final["encrypted_content"] = self._seal(text)
        self.output.append(final)
        events.append(self._event(t.ITEM_DONE, output_index=item.index, item=final))

    # -- MCP items (the tool loop, services/toolloop.py, runs them) ------------------------
    @property
    def waiting(self) -> Item | None:
        """The MCP item the tool loop must finish (an `mcp_call` or `mcp_list_tools`)."""
        item = self._tool
        if item is None:
            return None
        if item.mcp is None:
            return {"type": mcp.LIST_TOOLS, "id": item.item_id, "server_label": item.name}
        return {"type": mcp.CALL, "id": item.item_id, "server_label": item.mcp[0],
                "name": item.name, "arguments": "".join(item.parts)}

    def offer_mcp(self, names: dict[str, tuple[str, str, bool]]) -> None:
        """The MCP tools the model is offered: upstream name → (label, name, approval?)."""
        self._mcp = names

    def next_turn(self) -> None:
        """Another upstream turn of the same response follows (the tool loop's)."""
        self._finish = None
        self._pending = None
        self._usage_before = self.usage
        if self.phase is not Phase.DONE:
            self.phase = Phase.READY

    def mcp_list_begin(self, label: str) -> list[Event]:
        events: list[Event] = []
        item = self._begin(Phase.TOOL, mcp.ID_PREFIX[mcp.LIST_TOOLS], events)
        self._open, self._tool, item.name = None, item, label
        events.append(self._event(t.ITEM_ADDED, output_index=item.index,
                                  item=mcp.list_tools_item(item.item_id, label, [])))
        events.append(self._event(mcp.LIST_IN_PROGRESS, item_id=item.item_id,
                                  output_index=item.index))
        return events

    def mcp_list_end(self, tools: list[dict[str, Any]], error: str | None) -> list[Event]:
        item = self._tool
        assert item is not None and item.mcp is None
        self._tool, self.phase = None, Phase.READY
        where = {"item_id": item.item_id, "output_index": item.index}
        final = mcp.list_tools_item(item.item_id, item.name, tools, error)
        self.output.append(final)
        return [self._event(mcp.LIST_FAILED if error else mcp.LIST_COMPLETED, **where),
                self._event(t.ITEM_DONE, output_index=item.index, item=final)]

    def mcp_call_begin(self, label: str, name: str, arguments: str,
                       approval_request_id: str | None = None) -> list[Event]:
        """A call the model did not just make (one approved in a later request): its events
        as if streamed, then it waits for the loop like any other."""
        events: list[Event] = []
        item = self._begin(Phase.FUNCTION_CALL, mcp.ID_PREFIX[mcp.CALL], events)
        item.call_id = approval_request_id or ""
        self._open_mcp(item, (label, name, False), events)
        self._args(item, arguments, events)
        self._close_mcp(item, arguments, t.S_COMPLETED, events)
        return events

    def mcp_call_end(self, output: str | None, error: Any) -> list[Event]:
        item = self._tool
        assert item is not None and item.mcp is not None
        self._tool, self.phase = None, Phase.READY
        final = _mcp_item(item, "".join(item.parts),
                          status=t.S_FAILED if error is not None else t.S_COMPLETED,
                          output=output, error=error)
        self.output.append(final)
        where = {"item_id": item.item_id, "output_index": item.index}
        return [self._event(mcp.CALL_FAILED if error is not None else mcp.CALL_COMPLETED,
                            **where),
                self._event(t.ITEM_DONE, output_index=item.index, item=final)]

    def _open_mcp(self, item: _OpenItem, served: tuple[str, str, bool],
                  events: list[Event]) -> None:
        label, name, approval = served
        item.name, item.mcp = name, (label, approval)
        if item.call_index is not None:  # the model's call: an id of the item's own kind
            kind = mcp.APPROVAL_REQUEST if approval else mcp.CALL
            item.item_id = self._ids(mcp.ID_PREFIX[kind])
        events.append(self._event(t.ITEM_ADDED, output_index=item.index,
                                  item=_mcp_item(item, "", status=t.S_IN_PROGRESS)))
        if not approval:
            events.append(self._event(mcp.CALL_IN_PROGRESS, item_id=item.item_id,
                                      output_index=item.index))

    def _close_mcp(self, item: _OpenItem, text: str, status: str,
                   events: list[Event]) -> bool:
        """True when the item now waits for the loop (its arguments are whole); an approval
        request (or a call cut short) closes like any item."""
        assert item.mcp is not None
        if not item.mcp[1] and not item.parts:  # every done has a delta before it
            self._args(item, "", events)
        if item.mcp[1] or status != t.S_COMPLETED:
            if not item.mcp[1]:
                events.append(self._event(mcp.ARGS_DONE, item_id=item.item_id,
                                          output_index=item.index, arguments=text))
                events.append(self._event(mcp.CALL_FAILED, item_id=item.item_id,
                                          output_index=item.index))
            return False
        events.append(self._event(mcp.ARGS_DONE, item_id=item.item_id, output_index=item.index,
                                  arguments=text))
        self._open, self._tool, self.phase = None, item, Phase.TOOL
        return True

    def _end_tool(self, events: list[Event]) -> None:
        """A response ends (failed, cancelled) while an MCP item waits: it ends incomplete."""
        item = self._tool
        if item is None:
            return
        self._tool = None
        where = {"item_id": item.item_id, "output_index": item.index}
        if item.mcp is None:
            final = mcp.list_tools_item(item.item_id, item.name, [], "interrupted")
            events.append(self._event(mcp.LIST_FAILED, **where))
        else:
            final = _mcp_item(item, "".join(item.parts), status=t.S_INCOMPLETE)
            events.append(self._event(mcp.CALL_FAILED, **where))
        self.output.append(final)
        events.append(self._event(t.ITEM_DONE, output_index=item.index, item=final))

    def _close_custom(self, item: _OpenItem, status: str, events: list[Event]) -> Item:
        decoder = item.decoder
        if decoder is None:  # restored: the input is what its logged deltas said
            text, rest, sent = "".join(item.parts), "", bool(item.parts)
        else:
            text, rest = decoder.finish("".join(item.parts))
            sent = bool(decoder.sent)
        if item.stage == _STREAMING:
            where = {"item_id": item.item_id, "output_index": item.index}
            if rest or not sent:  # every done has a delta before it
                events.append(self._event(t.CUSTOM_INPUT_DELTA, **where, delta=rest))
            events.append(self._event(t.CUSTOM_INPUT_DONE, **where, input=text))
        return _call_item(item, status, text)

    def _close_part(self, item: _OpenItem, part: dict[str, Any], events: list[Event]) -> None:
        """The done events of a message's or reasoning item's one part, those not yet sent
        (a live item has all to come; one restored from a log may have some already)."""
        where = {"item_id": item.item_id, "output_index": item.index, "content_index": 0}
        text = part["text"]
        if item.stage == _STREAMING:
            message = item.kind is Phase.MESSAGE
            if not item.parts:  # a restored part cut before its first delta
                events.append(self._event(t.TEXT_DELTA if message else t.REASONING_DELTA,
                                          **where, delta="",
                                          **({"logprobs": []} if message else {})))
            if message:
                events.append(self._event(t.TEXT_DONE, **where, text=text, logprobs=[]))
            else:
                events.append(self._event(t.REASONING_DONE, **where, text=text))
        if _STREAMING <= item.stage <= _TEXT_DONE:
            events.append(self._event(t.PART_DONE, **where, part=part))

    def _close_summary(self, item: _OpenItem, text: str,
                       events: list[Event]) -> list[dict[str, Any]]:
        """The done events of a reasoning item's summary part, those not yet sent; the item's
        `summary`. A restored item first gets the summary text its log lacks (a cut between a
        reasoning delta and its summary twin)."""
        if item.summary == _ADDED:
            return []
        where = {"item_id": item.item_id, "output_index": item.index, "summary_index": 0}
        if item.summary == _STREAMING:
            sent = item.summary_sent
            if sent is not None and (sent < len(text) or sent == 0):
                events.append(self._event(t.SUMMARY_DELTA, **where, delta=text[sent:]))
            events.append(self._event(t.SUMMARY_DONE, **where, text=text))
        if item.summary <= _TEXT_DONE:
            events.append(self._event(t.SUMMARY_PART_DONE, **where, part=summary_part(text)))
        return [summary_part(text)]

    def _terminal(self, kind: str, events: list[Event]) -> list[Event]:
        self.status = t.STATUS_OF_TERMINAL[kind]
        self._pending = None
        self.final = None
        final = self.snapshot()
        self.final = final
        self.phase = Phase.DONE
        events.append({"type": kind, "sequence_number": self._take(), "response": final})
        return events

    # -- events ------------------------------------------------------------------------------
    def _take(self) -> int:
        seq = self._seq
        self._seq = seq + 1
        return seq

    def _event(self, kind: str, **fields: Any) -> Event:
        return {"type": kind, "sequence_number": self._take(), **fields}

    def _lifecycle(self, kind: str) -> Event:
        return {"type": kind, "sequence_number": self._take(), "response": self.snapshot()}


def _output_text(text: str) -> dict[str, Any]:
    return {"type": t.OUTPUT_TEXT, "annotations": [], "logprobs": [], "text": text}


def add_usage(before: dict[str, Any], now: dict[str, Any] | None) -> dict[str, Any]:
    """Usage of several upstream turns of one response, summed."""
    if now is None:
        return before
    out = {key: before[key] + now[key] for key in
           ("input_tokens", "output_tokens", "total_tokens")}
    out["input_tokens_details"] = {
        key: before["input_tokens_details"][key] + now["input_tokens_details"][key]
        for key in ("cached_tokens", "cache_write_tokens")}
    out["output_tokens_details"] = {"reasoning_tokens": (
        before["output_tokens_details"]["reasoning_tokens"] +
        now["output_tokens_details"]["reasoning_tokens"])}
    return out


def _mcp_item(item: _OpenItem, arguments: str, *, status: str = t.S_COMPLETED,
              output: str | None = None, error: Any = None) -> Item:
    assert item.mcp is not None
    label, approval = item.mcp
    if approval:
        return {"id": item.item_id, "type": mcp.APPROVAL_REQUEST, "arguments": arguments,
                "name": item.name, "server_label": label}
    out: Item = {"id": item.item_id, "type": mcp.CALL, "status": status,
                 "arguments": arguments, "name": item.name, "server_label": label,
                 "output": output, "error": error}
    if item.call_id:
        out["approval_request_id"] = item.call_id
    return out


def _call_item(item: _OpenItem, status: str, text: str) -> Item:
    """A function or custom tool call item, under the name (and namespace) the client gave."""
    out: Item
    if item.custom:
        out = {"id": item.item_id, "type": t.CUSTOM_TOOL_CALL, "status": status,
               "call_id": item.call_id, "input": text, "name": item.name}
    else:
        out = {"id": item.item_id, "type": t.FUNCTION_CALL, "status": status,
               "arguments": text, "call_id": item.call_id, "name": item.name}
    if item.namespace is not None:
        out["namespace"] = item.namespace
    return out
