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

    __slots__ = ("_flat", "_namespaces", "_targets")

    def __init__(self, tools: Iterable[dict[str, Any]]) -> None:
        self._targets: dict[str, Target] = {}
        self._flat: dict[tuple[str | None, str], str] = {}
        self._namespaces: set[str] = set()
        members: list[tuple[str, dict[str, Any]]] = []
        for tool in tools:
            kind = tool.get("type")
            if kind == "namespace":
                self._namespaces.add(tool["name"])
                members += [(tool["name"], m) for m in tool.get("tools") or ()]
            elif kind in ("function", "custom"):
                self._add(tool["name"], Target(tool["name"], None, kind == "custom"))
        # Members after every top-level tool: a top-level name is never renamed.
        for namespace, member in members:
            base = f"{namespace}{SEPARATOR}{member['name']}"
            flat, n = base, 1
            while flat in self._targets:
                n += 1
                flat = f"{base}_{n}"
            self._add(flat, Target(member["name"], namespace, member.get("type") == "custom"))

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
                   names: ToolNames) -> tuple[list[dict[str, Any]], Any]:
    """The chat request's `tools` and `tool_choice` (no tools offered: an empty list)."""
    offered: list[dict[str, Any]] = []
    for tool in tools:
        if tool["type"] not in ("function", "custom", "namespace"):
            continue  # mcp, hosted: offered by the tool loop (core/mcp.py, core/hosted.py)
        if tool["type"] == "namespace":
            offered += [_chat_function(m, names.flat(m["name"], tool["name"]))
                        for m in tool["tools"]]
        else:
            offered.append(_chat_function(tool, tool["name"]))
    upstream_choice: Any = choice
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        allowed: set[str] = set()
        for entry in choice["tools"]:
            if entry["type"] == "namespace":
                allowed |= names.in_namespace(entry["name"])
            elif entry["type"] in ("function", "custom"):
                allowed.add(names.flat(entry["name"], entry.get("namespace")))
        offered = [f for f in offered if f["function"]["name"] in allowed]
        upstream_choice = choice["mode"]
    elif isinstance(choice, dict) and choice["type"] not in ("function", "custom"):
        return [], "none"  # a hosted tool forced (core/hosted.py): the tool loop asks for it
    elif isinstance(choice, dict):
        upstream_choice = {"type": "function", "function": {
            "name": names.flat(choice["name"], choice.get("namespace"))}}
    return offered, upstream_choice


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
    for item in items:
        kind = item["type"]
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
