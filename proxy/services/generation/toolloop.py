"""The tool loop: one response, several upstream turns, the model's calls of the tools the
proxy runs (MCP tools, hosted tools such as web_search) run between.

    start:  list each server not yet listed in this chain (mcp_list_tools item)
            run the calls approved by this request's mcp_approval_response items
            open the first upstream turn (MCP and hosted tools offered as functions beside the
            client's)
    resume: (the assembler stopped at an mcp_call or a hosted call whose arguments are whole)
            run it (mcp_call.completed|failed; a hosted call's searching, then completed),
            then (unless a steer halted the loop) open the next upstream turn with the output
            so far appended to the messages
            (a hosted call as the model's call plus the tool's answer, which only this loop
            holds: the item shows what OpenAI's shows, not what the model read), or end the
            response

A server-run tool search (core/tools/toolsearch.py) runs here too, in process: the deferred
tools ranked against the call's words, its `tool_search_output` added, the tools it found
offered in every later turn of the response (and, through that item, of the chain).

Hosted tools (core/hosted.py) run through their runners (services/tools/hosted.py); a
kind this process has no runner for (a worker started without `--web-search`) fails its call,
and the model answers without it.

`Generation` (services/generation/run.py) drives it: it reads each upstream turn through the same
assembler, so the response's events keep one dense output_index and sequence_number across all
turns, and its recorder, cancellation and abandonment work as for a plain turn. The loop holds the
upstream call it opened until `Generation` takes it (`call`), and closes it in `aclose`.

Bounds: at most `max_calls` MCP and hosted calls per response (the request's `max_tool_calls`,
never more than `--max-mcp-calls`); once spent, the tools are no longer offered and the model
answers.
Every MCP operation is bounded in time by the client (proxy/services/tools/mcpclient.py).
Cancelling the task
(a client gone, a background cancel) interrupts an MCP call in flight: it is an await here.
Tool outputs and arguments are never logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core import hosted as hosting
from proxy.core import mcp
from proxy.core.errors import ProxyError
from proxy.core.events.assembler import Assembler
from proxy.core.hosted import HostedCall, HostedKind, HostedResult
from proxy.core.mcp import Approved, McpServer
from proxy.core.tools import toolsearch
from proxy.core.tools.toolnames import add_new, chat_functions, flatten_history
from proxy.core.translate.chat import to_messages
from proxy.core.translate.fleet_errors import failure_code, for_responses
from proxy.core.types import CUSTOM_TOOL_CALL, FUNCTION_CALL, Event
from proxy.services.fleet.fleet import Call
from proxy.services.fleet.gateway import Gateway
from proxy.services.tools.hosted import HostedTools
from proxy.services.tools.mcpclient import McpClient, McpFailure

log = logging.getLogger("proxy.mcp")

# Items that end a response for the client to act on (its own tools, an approval).
_CLIENT_ITEMS = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL, mcp.APPROVAL_REQUEST})


@dataclass
class LoopPlan:
    """What a response's loop needs, serializable into a background job's spec."""

    servers: tuple[McpServer, ...]
    listed: dict[str, list[dict[str, Any]]]  # server_label → tools, from the chain
    approved: list[Approved]
    max_calls: int
    # What `tool_choice` leaves of the MCP tools: the servers whose tools the model may call,
    # and the chat tool_choice mode when the client offered no tools of its own.
    offered: tuple[str, ...] = ()
    mode: str = "auto"
    # The hosted tools (core/hosted.py kind names) the model may call under `tool_choice`,
    # and their request options by kind name (file_search's stores, filters, include...).
    hosted: tuple[str, ...] = ()
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The tools a server-run tool search looks among (core/tools/toolsearch.py `searchable`),
    # or None: the request has no such search.
    searchable: list[dict[str, Any]] | None = None

    def to_spec(self) -> dict[str, Any]:
        spec = {"servers": [s.to_spec() for s in self.servers], "listed": self.listed,
                "approved": [[a.request_id, a.label, a.name, a.arguments]
                             for a in self.approved],
                "max_calls": self.max_calls, "offered": list(self.offered), "mode": self.mode,
                "hosted": list(self.hosted), "options": self.options}
        if self.searchable is not None:  # (a spec without it reads as before)
            spec["searchable"] = self.searchable
        return spec

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> LoopPlan:
        return cls(tuple(McpServer.from_spec(s) for s in spec["servers"]),
                   dict(spec["listed"]), [Approved(*a) for a in spec["approved"]],
                   int(spec["max_calls"]), tuple(spec.get("offered") or ()),
                   str(spec.get("mode") or "auto"),
                   tuple(k for k in spec.get("hosted") or () if k in hosting.KINDS),
                   dict(spec.get("options") or {}), spec.get("searchable"))


@dataclass
class ToolLoop:
    plan: LoopPlan
    client: McpClient
    gateway: Gateway
    chat: dict[str, Any]  # the first upstream request (its model too), MCP tools not yet in it
    tenant: str
    affinity: str | None = None
    home: str | None = None
    priority: bool = False
    hosted: HostedTools = field(default_factory=HostedTools)
    # The loop's own state, not the caller's to give.
    call: Call | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)
    # A server could not be listed (a JSON request: HTTP 424).
    listing_failed: bool = field(default=False, init=False)
    # A steer stops the response between turns (services/generation/boundary.py): set, no
    # further upstream turn is opened; the response then ends where it stands.
    halt: bool = field(default=False, init=False)
    _tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict, init=False)
    # Where this response's own output begins in the assembler's output.
    _first: int = field(default=0, init=False)
    _functions: list[dict[str, Any]] = field(default_factory=list, init=False)
    # Hosted calls run: item id → (the model's call id, function name, arguments, the tool's
    # answer), for the next turns' messages; how many sources were numbered so far.
    _answers: dict[str, tuple[str, str, str, str]] = field(default_factory=dict, init=False)
    _numbered: int = field(default=0, init=False)
    # Tool search: the deferred tools' words (read at the first search), and the chat
    # functions of what the searches loaded, which the next turns offer.
    _catalogue: list[toolsearch.Entry] | None = field(default=None, init=False)
    _loaded: list[dict[str, Any]] = field(default_factory=list, init=False)

    @property
    def model(self) -> str:
        return str(self.chat["model"])

    async def start(self, assembler: Assembler) -> AsyncIterator[list[Event]]:
        self._first = len(assembler.output)
        self._tools = dict(self.plan.listed)
        for server in self.plan.servers:
            if server.label in self._tools:
                continue
            yield assembler.mcp_list_begin(server.label)
            try:
                tools = await self.client.list_tools(server)
            except McpFailure as exc:
                yield assembler.mcp_list_end([], exc.message)
                self.listing_failed = True
                yield assembler.fail(f"MCP server {server.label!r} could not be listed: "
                                     f"{exc.message}")
                return
            tools = [t for t in tools if server.offers(t)]  # allowed_tools, as OpenAI lists
            self._tools[server.label] = tools
            yield assembler.mcp_list_end(tools, None)
        self._offer(assembler)
        servers = {s.label: s for s in self.plan.servers}
        for approved in self.plan.approved:
            yield assembler.mcp_call_begin(approved.label, approved.name, approved.arguments,
                                           approved.request_id)
            async for events in self._run_waiting(assembler, servers):
                yield events
        async for events in self._open(assembler):
            yield events

    async def resume(self, assembler: Assembler) -> AsyncIterator[list[Event]]:
        """Run the call the assembler waits on, then the next upstream turn (or the end)."""
        self.call = None
        servers = {s.label: s for s in self.plan.servers}
        async for events in self._run_waiting(assembler, servers):
            yield events
        if any(_for_client(item) for item in assembler.output[self._first:]):
            # The model also called the client's own tools: the client answers those first.
            yield assembler.end(finish="tool_calls")
            return
        assembler.next_turn()
        async for events in self._open(assembler):
            yield events

    async def aclose(self) -> None:
        call, self.call = self.call, None
        if call is not None:
            await call.aclose()

    async def _run_waiting(self, assembler: Assembler,
                           servers: dict[str, McpServer]) -> AsyncIterator[list[Event]]:
        waiting = assembler.waiting
        assert waiting is not None
        if waiting["type"] == toolsearch.CALL:
            yield self._search(assembler, waiting)
            return
        if waiting["type"] != mcp.CALL:
            async for events in self._run_hosted(assembler, waiting):
                yield events
            return
        if self.calls >= self.plan.max_calls:  # no longer offered; a model may still try
            yield assembler.mcp_call_end(None, {
                "type": "mcp_protocol_error", "code": -32000,
                "message": f"this response may make at most {self.plan.max_calls} MCP calls"})
            return
        self.calls += 1
        server = servers.get(waiting["server_label"])
        if server is None:  # cannot happen for calls we offered; a stale approval at most
            yield assembler.mcp_call_end(None, {"type": "mcp_protocol_error", "code": -32601,
                                                "message": "unknown MCP server"})
            return
        started = time.monotonic()
        try:
            result = await self.client.call_tool(server, waiting["name"], waiting["arguments"])
        except McpFailure as exc:
            _logged(server, waiting["name"], str(exc.error.get("type")), started)
            yield assembler.mcp_call_end(None, exc.error)
            return
        _logged(server, waiting["name"], "ok" if result.error is None else "tool_error", started)
        yield assembler.mcp_call_end(result.output, result.error)

    async def _run_hosted(self, assembler: Assembler,
                          waiting: dict[str, Any]) -> AsyncIterator[list[Event]]:
        arguments = waiting["arguments"]
        runner = self.hosted.get(waiting["kind"])
        if self.calls >= self.plan.max_calls or runner is None:
            why = (f"this response may make at most {self.plan.max_calls} tool calls"
                   if runner is not None else "the tool is not configured on this server")
            result = HostedResult({}, f"The tool was not run: {why}.", failed=True)
        else:
            self.calls += 1
            yield assembler.hosted_run()
            result = await runner.run(arguments, self._numbered + 1, HostedCall(
                self.tenant, self.plan.options.get(waiting["kind"], {})))
            self._numbered += len(result.sources)
        yield assembler.hosted_end(result)
        self._answers[waiting["id"]] = (waiting["call_id"], waiting["name"], arguments,
                                        result.output)

    def _search(self, assembler: Assembler, waiting: dict[str, Any]) -> list[Event]:
        """A server-run tool search: the deferred tools ranked against the call's words
        (pure, bounded: core/tools/toolsearch.py); what it found joins the next turns'
        tools. Past the response's call bound it finds nothing."""
        found: list[dict[str, Any]] = []
        if self.calls < self.plan.max_calls:
            self.calls += 1
            if self._catalogue is None:
                self._catalogue = toolsearch.catalogue(self.plan.searchable or ())
            query = toolsearch.query_of(toolsearch.arguments_object(waiting["arguments"]))
            found = toolsearch.definitions(toolsearch.rank(query, self._catalogue))
        events = assembler.search_end(found)
        assembler.know_tools(found)
        base = list(self.chat.get("tools") or ())
        more = [f for tool in found for f in chat_functions(tool, assembler.names)]
        self._loaded = add_new([*base, *self._loaded], more)[len(base):]
        return events

    def _offer(self, assembler: Assembler) -> None:
        """The MCP tools the model sees (allowed_tools applied), named for upstream."""
        offered = {label: [t for t in tools if self._server(label).offers(t)]
                   for label, tools in self._tools.items()
                   if self._has(label) and label in self.plan.offered}
        taken = [f["function"]["name"] for f in self.chat.get("tools") or ()]
        names = mcp.upstream_names(taken, offered)
        by_label = {label: {t["name"]: t for t in tools} for label, tools in offered.items()}
        self._functions = [mcp.chat_function(flat, by_label[label][name])
                           for flat, (label, name) in names.items()]
        assembler.offer_mcp({
            flat: (label, name,
                   self._server(label).needs_approval(by_label[label][name], name))
            for flat, (label, name) in names.items()})
        hosted: dict[str, HostedKind] = {}
        for kind in (hosting.KINDS[k] for k in self.plan.hosted):
            flat = hosting.function_name(kind, [*taken, *names, *hosted])
            hosted[flat] = kind
            self._functions.append(kind.chat_function(flat))
        assembler.offer_hosted(hosted)

    def _has(self, label: str) -> bool:
        return any(s.label == label for s in self.plan.servers)

    def _server(self, label: str) -> McpServer:
        return next(s for s in self.plan.servers if s.label == label)

    def _request(self, assembler: Assembler) -> dict[str, Any]:
        chat = dict(self.chat)
        chat["messages"] = [*self.chat["messages"],
                            *to_messages(flatten_history(assembler.output[self._first:],
                                                         assembler.names),
                                         hosted=self._answers)]
        # The client's tools and those a search loaded since the first turn.
        tools = [*(self.chat.get("tools") or ()), *self._loaded]
        if self.calls < self.plan.max_calls and self._functions:
            chat["tools"] = [*tools, *self._functions]
        elif not tools:  # the bound is spent: the model answers in text
            chat.pop("tools", None)
            chat.pop("tool_choice", None)
            return chat
        elif not self._loaded:
            return chat  # the client's tools, as the request had them
        else:
            chat["tools"] = tools
        # the client's own tools brought the request's choice; else it is the plan's.
        # `required` asks for a call: once one ran, the model may answer.
        choice = self.chat.get("tool_choice", self.plan.mode)
        chat["tool_choice"] = "auto" if choice == "required" and self.calls else choice
        return chat

    async def _open(self, assembler: Assembler) -> AsyncIterator[list[Event]]:
        if self.halt:
            return
        body = orjson.dumps(self._request(assembler))
        try:
            call = await self.gateway.open(self.model, self.tenant, body, stream=True,
                                           affinity=self.affinity, home=self.home,
                                           priority=self.priority, bounded=False)
        except ProxyError as exc:
            refused = for_responses(exc)
            yield assembler.fail(refused.message, failure_code(refused))
            return
        self.call = call
        self.home = call.replica.url  # the next turns go where the prefix cache is


def _for_client(item: dict[str, Any]) -> bool:
    """An item that ends the response for the client to act on: a call of its own tools, an
    approval to give, a tool search it runs itself."""
    if item["type"] == toolsearch.CALL:
        return item.get("execution") == "client"
    return item["type"] in _CLIENT_ITEMS


def _logged(server: McpServer, name: str, outcome: str, started: float) -> None:
    """One line per MCP call: where, what, how it went, how long. Never arguments or output
    (they are the user's data), never headers (credentials)."""
    log.info("mcp call %s/%s: %s in %.0f ms", server.label, name, outcome,
             (time.monotonic() - started) * 1000)
