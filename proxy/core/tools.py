"""Tools: what a create may offer the model, and the flat names they carry upstream. Pure.

Client side → upstream (a chat request knows only functions):
    function                       → the same function
    custom {name, format}          → a function of one string, `{"input": "..."}`; the model's
                                     call comes back as a `custom_tool_call` whose `input` is
                                     that string
    namespace {name, tools: [...]} → each member as its own function named `<ns>__<name>`
                                     (`_2`, `_3`, … appended while that name is taken); a call
                                     comes back with the member's own `name` plus `namespace`
    hosted tools (web_search, …)   → left out (`--hosted-tools drop`: the proxy names them in
                                     `x-proxy-dropped-tools`) or refused (`reject`)

`ToolNames` is the one map between both sides. It is rebuilt from the echoed `tools` wherever
it is needed (translation, the assembler, a background worker on another instance): it depends
on nothing but the tool list and its order, so every instance agrees on every name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.core.fields import (
    at,
    bad,
    expect_list,
    expect_object,
    one_of,
    opt_bool,
    opt_str,
    req_str,
)
from proxy.core.types import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    Item,
)

# Tools OpenAI runs on its side; a chat fleet cannot (PROTOCOL-2026.md §2.6).
HOSTED_TYPES = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11",
    "web_search_2025_08_26", "file_search", "code_interpreter", "image_generation",
    "computer", "computer_use", "computer_use_preview", "local_shell", "shell", "apply_patch",
    "tool_search",
})
SEPARATOR = "__"
CUSTOM_ARGUMENT = "input"
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SUPPORTED = ("only 'function', 'custom' and 'namespace' tools are run here (the fleet serves "
              "chat models); hosted tools such as web_search are dropped or refused as the "
              "server is configured")


@dataclass(frozen=True, slots=True)
class Target:
    """What an upstream function name stands for on the client's side."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass(frozen=True, slots=True)
class ParsedTools:
    tools: list[dict[str, Any]]  # as echoed in the Response object (hosted ones left out)
    dropped: tuple[str, ...]  # the types of the hosted tools left out, in request order


# -- parsing ----------------------------------------------------------------------------------
def parse_tools(value: Any, *, drop_hosted: bool, max_tools: int) -> ParsedTools:
    if value is None:
        return ParsedTools([], ())
    tools = expect_list(value, "tools")
    if len(tools) > max_tools:
        raise bad("tools", f"Invalid 'tools': too many tools ({len(tools)}); at most "
                           f"{max_tools} are allowed.")
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    names: set[tuple[str, str]] = set()  # (space, name): functions and customs share one
    for i, raw in enumerate(tools):
        path = at("tools", i)
        tool = expect_object(raw, path)
        kind = tool.get("type")
        if kind in HOSTED_TYPES:
            if not drop_hosted:
                raise bad(at(path, "type"), f"Tool type {kind!r} is a hosted tool this server "
                          "cannot run (it serves chat models); leave it out, or run the proxy "
                          "with --hosted-tools drop to have hosted tools ignored.")
            dropped.append(str(kind))
            continue
        parsed = _namespace(tool, path) if kind == "namespace" else _member(tool, path)
        key = ("namespace" if kind == "namespace" else "tool", parsed["name"])
        if key in names:
            raise bad(at(path, "name"), f"Duplicate tool name {parsed['name']!r}.")
        names.add(key)
        out.append(parsed)
    return ParsedTools(out, tuple(dropped))


def _name(tool: dict[str, Any], path: str) -> str:
    name = req_str(tool, "name", path)
    if not _NAME.match(name):
        raise bad(at(path, "name"), f"Invalid '{at(path, 'name')}': {name!r} does not match "
                                    "'^[a-zA-Z0-9_-]{1,64}$'.")
    return name


def _member(tool: dict[str, Any], path: str) -> dict[str, Any]:
    kind = tool.get("type")
    if kind == "function":
        parameters = tool.get("parameters")
        if parameters is not None:
            expect_object(parameters, at(path, "parameters"))
        return {"type": "function", "name": _name(tool, path),
                "description": opt_str(tool, "description", path),
                "parameters": parameters, "strict": opt_bool(tool, "strict", path)}
    if kind == "custom":
        return {"type": "custom", "name": _name(tool, path),
                "description": opt_str(tool, "description", path),
                "format": _custom_format(tool.get("format"), at(path, "format"))}
    where = at(path, "type")
    if kind is None:
        raise bad(where, f"Missing required parameter: '{where}'.")
    raise bad(where, f"Tool type {kind!r} is not supported: {_SUPPORTED}.")


def _custom_format(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {"type": "text"}
    fmt = expect_object(value, path)
    kind = one_of(fmt.get("type"), ("text", "grammar"), at(path, "type"))
    if kind == "text":
        return {"type": "text"}
    return {"type": "grammar",
            "syntax": one_of(fmt.get("syntax"), ("lark", "regex"), at(path, "syntax")),
            "definition": req_str(fmt, "definition", path)}


def _namespace(tool: dict[str, Any], path: str) -> dict[str, Any]:
    name = _name(tool, path)
    members_path = at(path, "tools")
    raw = expect_list(tool.get("tools"), members_path)
    if not raw:
        raise bad(members_path, f"Invalid '{members_path}': a namespace needs at least one "
                                "tool.")
    members: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        member_path = at(members_path, i)
        member = _member(expect_object(entry, member_path), member_path)
        if member["name"] in seen:
            raise bad(at(member_path, "name"), f"Duplicate tool name {member['name']!r} in "
                                               f"namespace {name!r}.")
        seen.add(member["name"])
        members.append(member)
    # The SDK's NamespaceTool requires a description string: "" when the client gave none.
    return {"type": "namespace", "name": name,
            "description": opt_str(tool, "description", path) or "", "tools": members}


def parse_tool_choice(value: Any, tools: list[dict[str, Any]],
                      dropped: tuple[str, ...]) -> str | dict[str, Any]:
    """`tool_choice`, checked against the tools that are offered. Forcing a hosted tool (which
    the proxy never runs) is a 400 whatever `--hosted-tools` says."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        mode = one_of(value, ("none", "auto", "required"), "tool_choice")
        if mode == "required" and not tools:
            hint = " (hosted tools are not run by this server)" if dropped else ""
            raise bad("tool_choice", f"`tool_choice` 'required' needs at least one tool{hint}.")
        return mode
    choice = expect_object(value, "tool_choice")
    kind = choice.get("type")
    names = ToolNames(tools)
    if kind in ("function", "custom"):
        name = req_str(choice, "name", "tool_choice")
        target = names.find(name, opt_str(choice, "namespace", "tool_choice"),
                            custom=kind == "custom")
        if target is None:
            raise bad("tool_choice.name", f"Tool choice {name!r} is not one of the {kind} "
                                          "tools.")
        out: dict[str, Any] = {"type": kind, "name": name}
        if target.namespace is not None:
            out["namespace"] = target.namespace
        return out
    if kind == "allowed_tools":
        return _allowed(choice, names)
    if kind in HOSTED_TYPES or kind == "mcp":
        raise bad("tool_choice.type", f"`tool_choice` forces the hosted tool {kind!r}, which this "
                                 "server does not run (hosted tools are left out of the "
                                 "request).")
    raise bad("tool_choice.type", f"Tool choice type {kind!r} is not supported: {_SUPPORTED}.")


def _allowed(choice: dict[str, Any], names: ToolNames) -> dict[str, Any]:
    mode = one_of(choice.get("mode"), ("auto", "required"), "tool_choice.mode")
    allowed = expect_list(choice.get("tools"), "tool_choice.tools")
    picked: list[dict[str, Any]] = []
    runnable = 0
    for i, raw in enumerate(allowed):
        path = at("tool_choice.tools", i)
        entry = expect_object(raw, path)
        kind = entry.get("type")
        if kind in HOSTED_TYPES:
            picked.append({"type": kind})  # allowed, never offered: the proxy cannot run it
            continue
        name = req_str(entry, "name", path)
        if kind == "namespace":
            found = names.has_namespace(name)
            out: dict[str, Any] = {"type": kind, "name": name}
        elif kind in ("function", "custom"):
            target = names.find(name, opt_str(entry, "namespace", path),
                                custom=kind == "custom")
            found = target is not None
            out = {"type": kind, "name": name}
            if target is not None and target.namespace is not None:
                out["namespace"] = target.namespace
        else:
            raise bad(at(path, "type"), f"Tool type {kind!r} cannot be allowed: {_SUPPORTED}.")
        if not found:
            raise bad(at(path, "name"), f"Allowed tool {name!r} is not one of the tools.")
        runnable += 1
        picked.append(out)
    if mode == "required" and not runnable:
        raise bad("tool_choice", "`tool_choice` requires a call among hosted tools only, which "
                                 "this server does not run.")
    return {"type": "allowed_tools", "mode": mode, "tools": picked}


# -- names ------------------------------------------------------------------------------------
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


def custom_arguments(text: str) -> str:
    """A custom tool's input as the arguments of its upstream function."""
    return json.dumps({CUSTOM_ARGUMENT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The input of a custom tool call from its upstream arguments. A model that wrote the
    input bare instead of as `{"input": ...}` still gets it through unchanged."""
    try:
        value = json.loads(arguments, strict=False)
    except ValueError:
        return arguments
    if isinstance(value, dict):
        text = value.get(CUSTOM_ARGUMENT)
        if isinstance(text, str):
            return _whole(text)
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return _whole(strings[0])
    return arguments


def _whole(text: str) -> str:
    """`text` with any lone surrogate (a `\\ud83d` escape without its pair) replaced: such a
    string cannot be encoded as UTF-8, so no event could carry it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class InputStream:
    """A custom tool's input streamed while its upstream arguments arrive: the string value of
    `{"input": "..."}` decoded piece by piece, each piece cut where no escape is split, so the
    pieces join to exactly the string. Arguments of another shape are not streamed: their input
    is found when the call ends (`finish`). Only custom tool calls pay for this, per fragment."""

    __slots__ = ("_pending", "_state", "sent")

    _SEEK, _STRING, _END, _OFF = range(4)

    def __init__(self) -> None:
        self._state = self._SEEK
        self._pending = ""  # arguments not yet decoded (the opening, or a split escape)
        self.sent: list[str] = []

    def feed(self, fragment: str) -> str:
        """The input text these arguments add ("" when there is none yet)."""
        state = self._state
        if state in (self._END, self._OFF):
            return ""
        pending = self._pending + fragment
        if state == self._SEEK:
            start = _value_start(pending)
            if start is None:
                self._pending = pending
                return ""
            if start < 0:
                self._state, self._pending = self._OFF, ""
                return ""
            self._state, pending = self._STRING, pending[start:]
        cut, closed = _safe_cut(pending)
        self._pending = pending[cut + 1 if closed else cut:]
        if closed:
            self._state, self._pending = self._END, ""
        text = _decode(pending[:cut])
        if text:
            self.sent.append(text)
        return text

    def finish(self, arguments: str) -> tuple[str, str]:
        """(the whole input, the part of it not sent yet), once the call has ended."""
        if self._state in (self._STRING, self._END):
            return "".join(self.sent), ""  # a cut-off string keeps what was sent
        text = custom_input(arguments)
        return text, text


_OPENING = ("{", '"' + CUSTOM_ARGUMENT + '"', ":", '"')
_SPACE = " \t\r\n"


def _value_start(raw: str) -> int | None:
    """Where the input string's text starts in `raw`; None: too early to say; -1: not the
    `{"input": "` shape."""
    i = 0
    for token in _OPENING:
        while i < len(raw) and raw[i] in _SPACE:
            i += 1
        seen = raw[i:i + len(token)]
        if seen != token[:len(seen)]:
            return -1
        if len(seen) < len(token):
            return None
        i += len(token)
    return i


def _safe_cut(raw: str) -> tuple[int, bool]:
    """How much of a JSON string's raw text decodes on its own (no escape or surrogate pair
    split), and whether the string's closing quote ends it there."""
    i, n = 0, len(raw)
    while i < n:
        char = raw[i]
        if char == '"':
            return i, True
        if char != "\\":
            i += 1
            continue
        if i + 1 >= n:
            break
        if raw[i + 1] != "u":
            i += 2
            continue
        if i + 6 > n:
            break
        high = raw[i + 2:i + 6].lower()
        if "d800" <= high <= "dbff":  # a high surrogate: keep its low half with it
            if i + 8 > n:
                break
            if raw[i + 6:i + 8] == "\\u":
                if i + 12 > n:
                    break
                i += 12
            else:  # a lone one: decoded on its own (and replaced)
                i += 6
            continue
        i += 6
    return i, False


def _decode(raw: str) -> str:
    try:
        text = json.loads('"' + raw + '"', strict=False)
    except ValueError:  # a bad escape: the model's characters as they came
        return raw
    return _whole(text) if isinstance(text, str) else raw


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
