"""Tool names between the client and the fleet, both ways. Pure.

Upstream a chat request knows only functions (core/request/tools.py parses what the client sent):
    function                       → the same function
    custom {name, format}          → a function of one string, `{"input": "..."}`
                                     (core/tools/custominput.py unwraps the call's input)
    namespace {name, tools: [...]} → each member as its own function named `<ns>__<name>`
                                     (`_2`, `_3`, … appended while that name is taken); a call
                                     comes back with the member's own `name` plus `namespace`

`ToolNames` is the one map between both sides. It is rebuilt from the echoed `tools` wherever
it is needed (translation, the assembler, a background worker on another instance): it depends
on nothing but the tool list and its order, so every instance agrees on every name. Calls in a
follow-up's history are flattened again (`flatten_history`), so the model sees one transcript.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.tools import toolsearch
from proxy.core.tools.custominput import CUSTOM_ARGUMENT, custom_arguments
from proxy.core.types import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    Item,
)

SEPARATOR = "__"


@dataclass(frozen=True, slots=True)
class Target:
    """What an upstream function name stands for on the client's side."""

    name: str
    namespace: str | None = None
    custom: bool = False


class ToolNames:
    """Upstream function name ↔ (name, namespace, custom?), for one request's tool list."""

    __slots__ = ("_flat", "_namespaces", "_targets", "search", "search_tool")

    def __init__(self, tools: Iterable[dict[str, Any]]) -> None:
        self._targets: dict[str, Target] = {}
        self._flat: dict[tuple[str | None, str], str] = {}
        self._namespaces: set[str] = set()
        # The `tool_search` tool (core/tools/toolsearch.py) and its function's name upstream.
        self.search_tool: dict[str, Any] | None = None
        self.search: str | None = None
        members: list[tuple[str, dict[str, Any]]] = []
        for tool in tools:
            kind = tool.get("type")
            if kind == "namespace":
                self._namespaces.add(tool["name"])
                members += [(tool["name"], m) for m in tool.get("tools") or ()]
            elif kind in ("function", "custom"):
                self._add(tool["name"], Target(tool["name"], None, kind == "custom"))
            elif kind == toolsearch.TOOL_TYPE:
                self.search_tool = tool
        # Members after every top-level tool: a top-level name is never renamed. A member
        # met again (a namespace a search loaded, beside the request's own) keeps its name.
        for namespace, member in members:
            if (namespace, member["name"]) in self._flat:
                continue
            base = f"{namespace}{SEPARATOR}{member['name']}"
            flat, n = base, 1
            while flat in self._targets:
                n += 1
                flat = f"{base}_{n}"
            self._add(flat, Target(member["name"], namespace, member.get("type") == "custom"))
        if self.search_tool is not None:  # after every tool's name: never a client's
            flat, n = toolsearch.TOOL_TYPE, 1
            while flat in self._targets:
                n += 1
                flat = f"{toolsearch.TOOL_TYPE}_{n}"
            self.search = flat

    def _add(self, flat: str, target: Target) -> None:
        self._targets[flat] = target
        self._flat.setdefault((target.namespace, target.name), flat)

    def target(self, flat: str) -> Target:
        """What the model's call of `flat` means; a name we never offered stays as it is."""
        return self._targets.get(flat) or Target(flat)

    def flat(self, name: str, namespace: str | None = None) -> str:
        """The upstream name of a tool (a history item may name one no longer offered: it
        still gets the scheme's name, so the model sees a consistent transcript)."""
        if not namespace:
            return name
        return self._flat.get((namespace, name), f"{namespace}{SEPARATOR}{name}")

    def find(self, name: str, namespace: str | None, *, custom: bool) -> Target | None:
        """The tool a `tool_choice` names. Without a namespace, a top-level tool, else the one
        namespace member of that name (the SDK's choice types carry no namespace)."""
        flat = self._flat.get((namespace or None, name))
        if flat is None and not namespace:
            members = [f for (ns, n), f in self._flat.items() if ns is not None and n == name]
            flat = members[0] if len(members) == 1 else None
        target = self._targets.get(flat) if flat is not None else None
        return target if target is not None and target.custom == custom else None

    def has_namespace(self, name: str) -> bool:
        return name in self._namespaces

    def in_namespace(self, namespace: str) -> set[str]:
        return {flat for flat, t in self._targets.items() if t.namespace == namespace}


# -- upstream ---------------------------------------------------------------------------------
def upstream_tools(tools: list[dict[str, Any]], choice: str | dict[str, Any],
                   names: ToolNames, loaded: Iterable[dict[str, Any]] = (),
                   deferred: int | None = None) -> tuple[list[dict[str, Any]], Any]:
    """The chat request's `tools` and `tool_choice` (no tools offered: an empty list).
    Deferred tools are left out (core/tools/toolsearch.py) but for those `loaded` (by a
    search or an `additional_tools` item of the history); a `tool_search` tool is the search
    function, offered when there is something to search (`deferred`: how many tools wait;
    None: those of `tools`) or the client runs the search over its own."""
    offered = _offered(tools, names, loaded, deferred)
    upstream_choice: Any = choice
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        allowed: set[str] = set()
        for entry in choice["tools"]:
            if entry["type"] == "namespace":
                allowed |= names.in_namespace(entry["name"])
            elif entry["type"] in ("function", "custom"):
                allowed.add(names.flat(entry["name"], entry.get("namespace")))
            elif entry["type"] == toolsearch.TOOL_TYPE and names.search is not None:
                allowed.add(names.search)
        offered = [f for f in offered if f["function"]["name"] in allowed]
        upstream_choice = choice["mode"]
    elif isinstance(choice, dict) and choice["type"] not in ("function", "custom"):
        return [], "none"  # a hosted tool forced (core/hosted.py): the tool loop asks for it
    elif isinstance(choice, dict):
        flat = names.flat(choice["name"], choice.get("namespace"))
        upstream_choice = {"type": "function", "function": {"name": flat}}
        # A forced tool is offered though deferred: naming it is loading it.
        offered = add_new(offered, [f for tool in tools for f in chat_functions(tool, names)
                                    if f["function"]["name"] == flat])
    return offered, upstream_choice


def _offered(tools: list[dict[str, Any]], names: ToolNames, loaded: Iterable[dict[str, Any]],
             deferred: int | None) -> list[dict[str, Any]]:
    offered: list[dict[str, Any]] = []
    for tool in tools:
        shown = toolsearch.offered_now(tool)
        if shown is not None:
            offered += chat_functions(shown, names)
    count = toolsearch.count_deferred(tools) if deferred is None else deferred
    if names.search is not None and (
            count or toolsearch.execution(names.search_tool) == "client"):
        offered.append(toolsearch.chat_function(names.search_tool, names.search, count))
    return add_new(offered, [f for tool in loaded for f in chat_functions(tool, names)])


def add_new(functions: list[dict[str, Any]], more: Iterable[dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """`functions` and those of `more` whose names are not taken yet (a tool loaded twice,
    or loaded beside the request's own copy, is offered once)."""
    have = {f["function"]["name"] for f in functions}
    out = list(functions)
    for function in more:
        if function["function"]["name"] not in have:
            have.add(function["function"]["name"])
            out.append(function)
    return out


def chat_functions(tool: dict[str, Any], names: ToolNames) -> list[dict[str, Any]]:
    """A client tool as the chat functions the model sees (a namespace: one per member;
    mcp, hosted and tool_search: none here, core/mcp.py and core/hosted.py offer theirs)."""
    if tool["type"] == "namespace":
        return [_chat_function(m, names.flat(m["name"], tool["name"])) for m in tool["tools"]]
    if tool["type"] in ("function", "custom"):
        return [_chat_function(tool, tool["name"])]
    return []


def _chat_function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if tool["type"] == "custom":
        description = tool.get("description") or ""
        fmt = tool.get("format") or {}
        if fmt.get("type") == "grammar":
            description += (f"\nThe `{CUSTOM_ARGUMENT}` must follow this {fmt['syntax']} "
                            f"grammar:\n{fmt['definition']}")
        if description:
            function["description"] = description.strip()
        function["parameters"] = {
            "type": "object",
            "properties": {CUSTOM_ARGUMENT: {"type": "string"}},
            "required": [CUSTOM_ARGUMENT],
            "additionalProperties": False,
        }
        return {"type": "function", "function": function}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def flatten_history(items: Iterable[Item], names: ToolNames) -> list[Item]:
    """History items as the upstream saw them: namespaced calls under their flat names,
    custom tool calls and outputs as function calls and outputs."""
    out: list[Item] = []
    searches: set[str] = set()  # the tool searches' call ids met so far
    for item in items:
        kind = item["type"]
        if kind in toolsearch.ITEM_TYPES or kind == toolsearch.ADDITIONAL_TOOLS:
            searched = _search_history(item, names, searches)
            if searched is not None:
                out.append(searched)
            continue
        if kind == FUNCTION_CALL and item.get("namespace"):
            item = {**item, "name": names.flat(item["name"], item["namespace"])}
        elif kind == CUSTOM_TOOL_CALL:
            item = {"id": item["id"], "type": FUNCTION_CALL, "call_id": item["call_id"],
                    "name": names.flat(item["name"], item.get("namespace")),
                    "arguments": custom_arguments(item["input"]), "status": "completed"}
        elif kind == CUSTOM_TOOL_CALL_OUTPUT:
            item = {**item, "type": FUNCTION_CALL_OUTPUT}
        out.append(item)
    return out


def _search_history(item: Item, names: ToolNames, searches: set[str]) -> Item | None:
    """A tool search as the model saw it: its call of the search function, the list of what
    loaded as that call's answer. An `additional_tools` item is no message (its tools are
    offered, core/tools/toolsearch.py `loaded_tools`), nor is a search output that answers
    no call before it (its tools still load): a tool message no call asked for is refused
    by chat templates."""
    call_id = item.get("call_id")
    if item["type"] == toolsearch.CALL and call_id:
        searches.add(call_id)
        arguments = item.get("arguments")
        return {"id": item["id"], "type": FUNCTION_CALL, "call_id": call_id,
                "name": names.search or toolsearch.TOOL_TYPE, "status": "completed",
                "arguments": arguments if isinstance(arguments, str) else
                orjson.dumps(arguments if arguments is not None else {}).decode()}
    if item["type"] == toolsearch.OUTPUT and call_id in searches:
        return {"id": item["id"], "type": FUNCTION_CALL_OUTPUT, "call_id": call_id,
                "output": toolsearch.answer(item.get("tools") or []), "status": "completed"}
    return None
