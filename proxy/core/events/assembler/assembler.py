"""The Assembler: one response's events, made from its upstream chunks.

An explicit state machine (machine.py) with one open item at a time; each item kind makes its
own events (text.py, calls.py, mcpitems.py); the response's own state, how items open and close
and how the response ends are response.py. This module reads the chunks (the hot path,
docs/design.md: a few dict lookups, then the open item's `delta`; only opening and closing an item
takes the slower way) and takes the tool loop's MCP steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core import ids as idp
from proxy.core import mcp
from proxy.core import types as t
from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler.calls import (
    CallItem,
    CustomToolCallItem,
    FunctionCallItem,
    PendingCall,
)
from proxy.core.events.assembler.finish import INCOMPLETE, WHOLE, call_was_cut
from proxy.core.events.assembler.hosteditems import HostedCallItem, ToolSearchCallItem
from proxy.core.events.assembler.item import ItemState
from proxy.core.events.assembler.logprobs import Logprob, content_logprobs
from proxy.core.events.assembler.machine import Phase
from proxy.core.events.assembler.mcpitems import McpApprovalItem, McpCallItem, McpListItem
from proxy.core.events.assembler.response import ResponseState
from proxy.core.events.assembler.text import (
    MessageItem,
    ReasoningItem,
    SummarisedReasoningItem,
)
from proxy.core.events.assembler.usage import add_usage, map_usage
from proxy.core.events.summaries import wants_summaries
from proxy.core.hosted import HostedKind, HostedResult, Source
from proxy.core.ids import IdFactory
from proxy.core.tools import toolsearch
from proxy.core.tools.toolnames import ToolNames
from proxy.core.translate.fleet_errors import failure_code, stream_refusal
from proxy.core.types import Chunk, Event, Item, ResponseObject

# Bound once: an enum member's lookup (`Phase.DONE`) costs ~60 ns on 3.11, the per-chunk
# path takes four of them.
_REASONING, _MESSAGE, _TOOL, _DONE = Phase.REASONING, Phase.MESSAGE, Phase.TOOL, Phase.DONE


class Assembler(ResponseState):
    def __init__(
        self,
        response: ResponseObject,
        *,
        ids: IdFactory,
        clock: Callable[[], float],
        seq: int = 0,
        seal_reasoning: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(response, ids, clock, seq, seal_reasoning)
        self._names = ToolNames(response.get("tools") or ())
        self._known: list[dict[str, Any]] = []  # tools named beside those (`know_tools`)
        self._summaries = wants_summaries(response)
        # The upstream turn: a call still waiting for its name, the finish_reason, and the
        # output deltas since the last usage it reported (what a turn cut before its usage
        # chunk still streamed, services/metering/meter.py; one increment per chunk).
        self._pending: PendingCall | None = None
        self._finish: str | None = None
        self.deltas = 0
        # Whitespace-only content while no message is open (Hermes/Qwen stream "\n\n" after
        # </think> and "\n" between parallel calls): it opens no message unless text follows.
        self._held: list[str] = []
        self._held_logprobs: list[Logprob] = []  # theirs, when logprobs were asked for
        # The request's limit and this turn's completion tokens: whether a call was cut.
        self._limit = response.get("max_output_tokens")
        self._turn_tokens: Any = None
        # This turn's reasoning fragments: its reasoning tokens when vLLM reports none (only
        # 2026 builds with a reasoning parser send `reasoning_tokens`; usage.py).
        self._reasoned = 0
        # MCP tools (core/mcp.py): upstream name → (server_label, tool name, approval?), set by
        # the tool loop once listed; usage of the upstream turns before this one (one
        # response may take several).
        self._mcp: dict[str, tuple[str, str, bool]] = {}
        self._usage_before: dict[str, Any] | None = None
        # Hosted tools (core/hosted.py): upstream name → kind, set by the tool loop; what
        # they found so far, which the answer's text may cite.
        self._hosted: dict[str, HostedKind] = {}
        self._sources: list[Source] = []
        # The fleet's 400 when it came as the stream's first frame (vLLM 0.32 checks some
        # fields only then): the create path answers it as the 400 it is.
        self.refusal: InvalidRequest | None = None

    # -- upstream chunks (the hot path) --------------------------------------------------------
    def feed(self, chunk: Chunk) -> list[Event]:
        """One upstream chunk's events. Where an MCP call now waits, the rest of the chunk
        (and of the upstream turn, but for its usage) is not read: items never interleave."""
        phase = self.phase
        if phase is _DONE:
            return []
        if phase is _TOOL:  # the rest of a turn whose MCP call waits: usage only
            self._usage(chunk.get("usage"))
            return []
        error = chunk.get("error")
        if error:
            return self._upstream_error(error)
        usage = chunk.get("usage")
        if usage:
            self._usage(usage)
        events: list[Event] = []
        choices = chunk.get("choices")
        if not choices:
            return events
        choice = choices[0]
        delta = choice.get("delta")
        if delta:
            self.deltas += 1
            item = self._open
            content = delta.get("content")
            # The per-token cases: a fragment alone continuing the open item of its kind
            # (content without logprobs, or reasoning). What the general way (`_delta`) comes
            # to, without its lookups and calls (~0.3 µs a token).
            if item is not None and len(delta) == 1 and (
                    content and item.kind is _MESSAGE and not choice.get("logprobs")):
                item.delta(content, events)
            elif item is not None and len(delta) == 1 and content is None and \
                    item.kind is _REASONING and (
                        reasoning := delta.get("reasoning") or delta.get("reasoning_content")):
                self._reasoned += 1
                item.delta(reasoning, events)
            elif self._delta(choice, delta, content, events):
                return events
        finish = choice.get("finish_reason")
        if finish:
            self._finished(finish, events)
        return events

    def _delta(self, choice: dict[str, Any], delta: dict[str, Any], content: Any,
               events: list[Event]) -> bool:
        """A chunk's delta, in its order: reasoning, content, tool calls. Whether an MCP call
        now waits (then the rest of the chunk is not read)."""
        reasoning = delta.get("reasoning")
        if reasoning is None:  # vLLM before PR #27752 named it reasoning_content
            reasoning = delta.get("reasoning_content")
        if reasoning and self._reason(reasoning, events):
            return True
        # `logprobs`: null unless the request included them (then this content's share)
        if content and self._stream(_MESSAGE, content, events, choice.get("logprobs") and
                                    content_logprobs(choice["logprobs"], content, delta)):
            return True
        calls = delta.get("tool_calls")
        return self._tool_calls(calls, events) if calls else False

    def _reason(self, text: str, events: list[Event]) -> bool:
        self._reasoned += 1
        return self._stream(_REASONING, text, events)

    def _stream(self, kind: Phase, text: str, events: list[Event],
                logprobs: list[Logprob] | None = None) -> bool:
        """A reasoning or content fragment (`logprobs`: a content fragment's, when asked
        for): the open item of that kind goes on, else one opens. Whether an MCP call now
        waits instead (`_tool_calls` the same)."""
        item = self._open
        if item is None or item.kind is not kind:
            if kind is _MESSAGE:
                if text.isspace():
                    self._held.append(text)
                    if logprobs:
                        self._held_logprobs += logprobs
                    return False
                if self._held:  # the held whitespace starts the message after all
                    text = "".join(self._held) + text
                    if self._held_logprobs:
                        logprobs = self._held_logprobs + (logprobs or [])
                    self._drop_held()
            if self._close(events, t.S_COMPLETED):
                return True
            item = self._begin(self._text_item(kind), events)
        if logprobs:
            assert isinstance(item, MessageItem)
            item.delta(text, events, logprobs)
        else:
            item.delta(text, events)
        return False

    def _drop_held(self) -> None:
        self._held = []
        self._held_logprobs = []

    def _text_item(self, kind: Phase) -> MessageItem | ReasoningItem:
        if kind is Phase.REASONING:
            shape = SummarisedReasoningItem if self._summaries else ReasoningItem
            return shape(self._ids(idp.REASONING), len(self.output), self._seq, seal=self._seal)
        message = MessageItem(self._ids(idp.MESSAGE), len(self.output), self._seq)
        if self._sources:
            message.sources = self._sources
        return message

    def _tool_calls(self, calls: list[dict[str, Any]], events: list[Event]) -> bool:
        for call in calls:
            item = self._open
            open_index = item.call_index if isinstance(item, CallItem) else None
            index = call.get("index")
            if not isinstance(index, int):
                index = open_index if open_index is not None else 0
            function = call.get("function") or {}
            args = function.get("arguments")
            if item is not None and open_index == index:  # the open call goes on
                if args:
                    item.delta(args, events)
            elif self._pending_call(call, index, function.get("name"), args, events):
                return True
        return False

    def _pending_call(self, call: dict[str, Any], index: int, name: str | None,
                      args: str | None, events: list[Event]) -> bool:
        """A call not open yet: its fragments are kept until its name arrives (the SDK wants
        the name on added), then its item opens with them."""
        pending = self._pending
        if pending is None or pending.index != index:
            pending = self._pending = PendingCall(index, call.get("id"))
        elif call.get("id") and not pending.call_id:
            pending.call_id = call.get("id")
        if args:
            pending.args.append(args)
        if not name:
            return False
        self._pending = None
        self._drop_held()  # whitespace beside a tool call is no message
        if self._close(events, t.S_COMPLETED):
            return True
        item = self._begin(self._call_item(name, index, pending.call_id), events)
        for fragment in pending.args:
            item.delta(fragment, events)
        return False

    def _call_item(self, name: str, index: int, call_id: str | None) -> CallItem:
        item_id, at = self._ids(idp.FUNCTION_CALL), len(self.output)
        call_id = call_id or self._ids(idp.CALL)  # (drawn for an MCP call too, as always)
        if name == self._names.search:
            return ToolSearchCallItem(self._ids(toolsearch.CALL_PREFIX), at, self._seq,
                                      name=name, call_id=call_id, call_index=index,
                                      execution=toolsearch.execution(self._names.search_tool))
        hosted = self._hosted.get(name) if self._hosted else None
        if hosted is not None:
            return HostedCallItem(self._ids(hosted.id_prefix), at, self._seq, kind=hosted,
                                  name=name, call_id=call_id, call_index=index)
        served = self._mcp.get(name) if self._mcp else None
        if served is not None:  # the model's call id stays upstream; the item id is ours
            label, name, approval = served
            kind = mcp.APPROVAL_REQUEST if approval else mcp.CALL
            item_id = self._ids(mcp.ID_PREFIX[kind])
            if approval:
                return McpApprovalItem(item_id, at, self._seq, label=label, name=name,
                                       call_index=index)
            return McpCallItem(item_id, at, self._seq, label=label, name=name,
                               call_index=index)
        target = self._names.target(name)
        kind_of = CustomToolCallItem if target.custom else FunctionCallItem
        return kind_of(item_id, at, self._seq, name=target.name, call_id=call_id,
                       namespace=target.namespace, call_index=index)

    def _upstream_error(self, error: Any) -> list[Event]:
        refusal = stream_refusal(error) if not self.output and not self.deltas else None
        if refusal is not None:  # the request refused, as an HTTP 400 would (fleet_errors.py)
            self.refusal = refusal
            return self.fail(refusal.message, failure_code(refusal))
        message = error.get("message") if isinstance(error, dict) else str(error)
        return self.fail(f"upstream error: {message or 'unknown error'}")

    def _finished(self, finish: str, events: list[Event]) -> None:
        self._finish = finish
        if self._held:
            held, logprobs = self._held, self._held_logprobs
            self._drop_held()
            if (finish != "tool_calls" and not isinstance(self._open, CallItem)
                    and not self._close(events, t.S_COMPLETED)):  # no call: it is the answer
                message = self._begin(MessageItem(self._ids(idp.MESSAGE), len(self.output),
                                                  self._seq), events)
                message.delta("".join(held), events, logprobs or None)
        if finish in WHOLE and isinstance(self._open, FunctionCallItem):
            return  # closed by end(): the usage after this chunk tells whether it was cut
        status = t.S_COMPLETED if finish in WHOLE else t.S_INCOMPLETE
        if not self._close(events, status):
            self._to(Phase.FINISHED)

    def _usage(self, usage: dict[str, Any] | None) -> None:
        if usage:
            self.deltas = 0  # counted in the usage
            self._turn_tokens = usage.get("completion_tokens")
            self.usage = map_usage(usage, reasoned=self._reasoned)
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
        if finish == "abort":  # the engine dropped it (not our client): a server failure
            return self.fail("upstream aborted the request")
        events: list[Event] = []
        call = self._open
        if isinstance(call, FunctionCallItem) and self._finish in WHOLE:
            if call_was_cut("".join(call.parts), self._limit, self._turn_tokens):
                finish = "length"  # the client must not run a truncated call
            self._close(events, t.S_INCOMPLETE if finish == "length" else t.S_COMPLETED)
        if finish in INCOMPLETE:
            self._incomplete = {"reason": INCOMPLETE[finish]}
            return self._terminal(t.INCOMPLETE, events)
        if finish not in WHOLE:
            return self.fail(f"upstream finished with {finish!r}")
        self._completed_at = int(self._clock())
        return self._terminal(t.COMPLETED, events)

    # -- MCP steps (the tool loop, services/generation/toolloop.py, runs the items)
    # ---------------------
    @property
    def waiting(self) -> Item | None:
        """The item the tool loop must finish (an `mcp_call`, `mcp_list_tools`, or a hosted
        tool's call)."""
        return self._tool.waiting() if self._tool is not None else None

    def offer_mcp(self, names: dict[str, tuple[str, str, bool]]) -> None:
        """The MCP tools the model is offered: upstream name → (label, name, approval?)."""
        self._mcp = names

    def offer_hosted(self, names: dict[str, HostedKind]) -> None:
        """The hosted tools the model is offered: upstream name → kind."""
        self._hosted = names

    def hosted_run(self) -> list[Event]:
        """The waiting hosted call runs now (its `searching` event)."""
        item = self._tool
        assert isinstance(item, HostedCallItem)
        events: list[Event] = []
        item.running(events)
        return events

    def hosted_end(self, result: HostedResult) -> list[Event]:
        """The waiting hosted call ran: its end; what it found may be cited from now on."""
        item = self._release()
        assert isinstance(item, HostedCallItem)
        events: list[Event] = []
        self._done(item, item.finish(result, events), events)
        self._sources += result.sources
        return events

    @property
    def names(self) -> ToolNames:
        """The response's tool names between the client and the fleet."""
        return self._names

    def know_tools(self, tools: list[dict[str, Any]]) -> None:
        """More tools offered beside the response's own (loaded by a search, brought by an
        `additional_tools` item): their calls come back under the client's names."""
        if tools:
            self._known += tools
            self._names = ToolNames([*(self._base.get("tools") or ()), *self._known])

    def search_end(self, tools: list[dict[str, Any]]) -> list[Event]:
        """The waiting tool search ran (the tool loop's): its call done, then its output
        with the definitions it loaded."""
        item = self._release()
        assert isinstance(item, ToolSearchCallItem)
        events: list[Event] = []
        self._done(item, item.item(t.S_COMPLETED), events)
        found = ItemState(self._ids(toolsearch.OUTPUT_PREFIX), len(self.output), self._seq)
        output = toolsearch.output_item(found.item_id, item.call_id, tools)
        events.append(found.added(output))
        self._done(found, output, events)
        return events

    def next_turn(self) -> None:
        """Another upstream turn of the same response follows (the tool loop's)."""
        self._finish = None
        self._pending = None
        self._drop_held()
        self._turn_tokens = None
        self._reasoned = 0
        self._usage_before = self.usage
        if self.phase is not Phase.DONE:
            self._to(Phase.READY)

    def mcp_list_begin(self, label: str) -> list[Event]:
        events: list[Event] = []
        self._close(events, t.S_COMPLETED)
        item = McpListItem(self._ids(mcp.ID_PREFIX[mcp.LIST_TOOLS]), len(self.output),
                           self._seq, label)
        self._tool = item
        self._to(Phase.TOOL)
        item.open(events)
        return events

    def mcp_list_end(self, tools: list[dict[str, Any]], error: str | None) -> list[Event]:
        item = self._release()
        assert isinstance(item, McpListItem)
        events: list[Event] = []
        self._done(item, item.finish(tools, error, events), events)
        return events

    def mcp_call_begin(self, label: str, name: str, arguments: str,
                       approval_request_id: str | None = None) -> list[Event]:
        """A call the model did not just make (one approved in a later request): its events
        as if streamed, then it waits for the loop like any other."""
        events: list[Event] = []
        self._close(events, t.S_COMPLETED)
        item = self._begin(McpCallItem(self._ids(mcp.ID_PREFIX[mcp.CALL]), len(self.output),
                                       self._seq, label=label, name=name,
                                       call_id=approval_request_id or ""), events)
        item.delta(arguments, events)
        self._close(events, t.S_COMPLETED)  # whole: it waits
        return events

    def mcp_call_end(self, output: str | None, error: Any) -> list[Event]:
        item = self._release()
        assert isinstance(item, McpCallItem)
        events: list[Event] = []
        self._done(item, item.finish(output, error, events), events)
        return events

    def _release(self) -> McpCallItem | McpListItem | HostedCallItem | ToolSearchCallItem:
        """The waiting tool item, which the tool loop has finished, leaves Phase.TOOL."""
        item = self._tool
        assert item is not None
        self._tool = None
        self._to(Phase.READY)
        return item
