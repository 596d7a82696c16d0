"""Tools a create may offer the model, and `tool_choice`: parsed and checked. Pure.

Kinds: `function`, `custom` (freeform input), `namespace` (a group of functions and custom
tools); how each reaches the fleet is core/tools/toolnames.py. Hosted tools (web_search, …) run on
OpenAI's side and a chat fleet cannot run them: left out and named (`--hosted-tools drop`, the
proxy's `x-proxy-dropped-tools` header) or refused (`reject`), but for those the proxy runs
itself (`web_search` with `--web-search`, core/hosted.py), which the tool loop offers. A
`tool_choice` that forces a hosted tool is refused unless the proxy runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.core.hosted import echo_tool, kind_of_type
from proxy.core.mcp import McpServer, parse_mcp_tool
from proxy.core.request.fields import (
    at,
    bad,
    expect_list,
    expect_object,
    one_of,
    opt_bool,
    opt_str,
    req_str,
)
from proxy.core.tools import toolsearch
from proxy.core.tools.toolnames import ToolNames

# Tools OpenAI runs on its side; a chat fleet cannot (docs/protocol-2026.md §2.6).
HOSTED_TYPES = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11",
    "web_search_2025_08_26", "file_search", "code_interpreter", "image_generation",
    "computer", "computer_use", "computer_use_preview", "local_shell", "shell", "apply_patch",
})
# Tool types served nowhere here, whatever `--hosted-tools` says: a 400 naming them.
_REFUSED = {
    "programmatic_tool_calling": "programmatic tool calling (model-written programs calling "
                                 "tools) is not run by this server",
}
# The most tools one input item may bring (a request's own tool limit).
MAX_ITEM_TOOLS = 128
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SUPPORTED = ("only 'function', 'custom' and 'namespace' tools are run here (the fleet serves "
              "chat models); hosted tools such as web_search are dropped or refused as the "
              "server is configured")


@dataclass(frozen=True, slots=True)
class ParsedTools:
    tools: list[dict[str, Any]]  # as echoed in the Response object (hosted ones left out)
    dropped: tuple[str, ...]  # the types of the hosted tools left out, in request order
    mcp: tuple[McpServer, ...] = ()  # `mcp` tools, run by the proxy (core/mcp.py)
    hosted: tuple[str, ...] = ()  # hosted tools the proxy runs (core/hosted.py kind names)
    # Their options, by kind name, for the kinds that have any (file_search's stores ...).
    hosted_options: dict[str, dict[str, Any]] = field(default_factory=dict)


# -- parsing ----------------------------------------------------------------------------------
def parse_tools(value: Any, *, drop_hosted: bool, max_tools: int,
                mcp_allow: tuple[str, ...] = (),
                run_hosted: frozenset[str] = frozenset()) -> ParsedTools:
    """`run_hosted`: the hosted tool types this server runs itself (`--web-search`): echoed
    and run by the tool loop instead of dropped or refused."""
    if value is None:
        return ParsedTools([], ())
    tools = expect_list(value, "tools")
    _count(tools, max_tools, "tools")
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    names: set[tuple[str, str]] = set()  # (space, name): functions and customs share one
    servers: list[McpServer] = []
    hosted: list[str] = []
    options: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(tools):
        path = at("tools", i)
        tool = expect_object(raw, path)
        kind = tool.get("type")
        if _late(tool, path, out):
            continue
        if _hosted(kind) and kind in run_hosted:
            served = kind_of_type(kind)
            assert served is not None
            if served.name not in hosted:  # one search tool however many entries name it
                hosted.append(served.name)
                if served.parse is not None:
                    options[served.name] = served.parse(tool, path)
                    out.append(options[served.name])
                else:
                    out.append(echo_tool(tool))
            continue
        if _hosted(kind):
            if not drop_hosted:
                raise bad(at(path, "type"), f"Tool type {kind!r} is a hosted tool this server "
                          "cannot run (it serves chat models); leave it out, or run the proxy "
                          "with --hosted-tools drop to have hosted tools ignored.")
            dropped.append(str(kind))
            continue
        if kind == "mcp":
            echo, server = parse_mcp_tool(tool, path, mcp_allow)
            if any(s.label == server.label for s in servers):
                raise bad(at(path, "server_label"), f"Duplicate MCP server_label "
                                                    f"{server.label!r}.")
            servers.append(server)
            out.append(echo)
            continue
        parsed = _namespace(tool, path) if kind == "namespace" else _member(tool, path)
        key = ("namespace" if kind == "namespace" else "tool", parsed["name"])
        if key in names:
            raise bad(at(path, "name"), f"Duplicate tool name {parsed['name']!r}.")
        names.add(key)
        out.append(parsed)
    _deferred_need_search(out, "tools")
    return ParsedTools(out, tuple(dropped), tuple(servers), tuple(hosted), options)


def parse_member_tools(value: Any, path: str, max_tools: int) -> list[dict[str, Any]]:
    """The tools an input item brings (`additional_tools`): functions, custom and namespace
    tools only (what a chat model can be offered mid-conversation), checked as `tools` are."""
    tools = expect_list(value, path)
    _count(tools, max_tools, path)
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(tools):
        where = at(path, i)
        tool = expect_object(raw, where)
        out.append(_namespace(tool, where) if tool.get("type") == "namespace"
                   else _member(tool, where))
    return out


def _count(tools: list[Any], max_tools: int, path: str) -> None:
    """Deferred tools (core/tools/toolsearch.py) count against their own bound, not the tool
    limit: the model sees them only once a search loads them."""
    deferred = sum(_deferred_count(t) for t in tools)
    offered = len(tools) - sum(1 for t in tools if isinstance(t, dict) and _all_deferred(t))
    if offered > max_tools:
        raise bad(path, f"Invalid '{path}': too many tools ({offered}); at most "
                        f"{max_tools} are allowed (tools with `defer_loading` not counted).")
    if deferred > toolsearch.MAX_DEFERRED:
        raise bad(path, f"Invalid '{path}': too many tools with `defer_loading` ({deferred}); "
                        f"at most {toolsearch.MAX_DEFERRED} are allowed.")


def _deferred_count(tool: Any) -> int:
    if not isinstance(tool, dict):
        return 0
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return sum(1 for m in tool["tools"] if isinstance(m, dict)
                   and m.get("defer_loading") is True)
    return 1 if tool.get("type") in ("function", "custom") and tool.get("defer_loading") is True \
        else 0


def _all_deferred(tool: dict[str, Any]) -> bool:
    members = tool.get("tools")
    if tool.get("type") == "namespace" and isinstance(members, list) and members:
        return _deferred_count(tool) == len(members)
    return _deferred_count(tool) == 1


def _deferred_need_search(tools: list[dict[str, Any]], path: str) -> None:
    """Deferred tools without a `tool_search` tool could never be loaded: a 400 naming them
    (not sent to the model as if they were not deferred)."""
    if toolsearch.search_tool(tools) is not None:
        return
    names = [t["name"] for t in tools if toolsearch.is_deferred(t)]
    if names:
        raise bad(path, f"Tools {', '.join(repr(n) for n in names)} have `defer_loading: true`"
                        ", which needs a 'tool_search' tool among the tools to load them.")


def _late(tool: dict[str, Any], path: str, out: list[dict[str, Any]]) -> bool:
    """The late-2026 tool types: `tool_search` served (added to `out`, True), those nothing
    here runs refused by name."""
    kind = tool.get("type")
    if isinstance(kind, str) and kind in _REFUSED:
        raise bad(at(path, "type"), f"Tool type {kind!r} is not supported: {_REFUSED[kind]}.")
    if kind == "mcp":
        _direct_only(tool, path)
        if opt_bool(tool, "defer_loading", path):
            raise bad(at(path, "defer_loading"), "An MCP server's tools are listed and offered "
                      "whole on this server; `defer_loading` on an 'mcp' tool is not "
                      "supported (defer function or namespace tools instead).")
    if kind != toolsearch.TOOL_TYPE:
        return False
    if any(t["type"] == kind for t in out):
        raise bad(at(path, "type"), "Only one 'tool_search' tool is allowed.")
    out.append(_search_tool(tool, path))
    return True


def _search_tool(tool: dict[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": toolsearch.TOOL_TYPE, "execution": one_of(
        tool.get("execution") or "server", toolsearch.EXECUTIONS, at(path, "execution"))}
    description = opt_str(tool, "description", path)
    if description is not None:
        out["description"] = description
    if tool.get("parameters") is not None:
        out["parameters"] = expect_object(tool["parameters"], at(path, "parameters"))
    return out


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
        out: dict[str, Any] = {"type": "function", "name": _name(tool, path),
                               "description": opt_str(tool, "description", path),
                               "parameters": parameters,
                               "strict": opt_bool(tool, "strict", path)}
        return _function_extras(tool, path, out)
    if kind == "custom":
        return _function_extras(tool, path, {
            "type": "custom", "name": _name(tool, path),
            "description": opt_str(tool, "description", path),
            "format": _custom_format(tool.get("format"), at(path, "format"))})
    where = at(path, "type")
    if kind is None:
        raise bad(where, f"Missing required parameter: '{where}'.")
    raise bad(where, f"Tool type {kind!r} is not supported: {_SUPPORTED}.")


def _function_extras(tool: dict[str, Any], path: str, out: dict[str, Any]) -> dict[str, Any]:
    """The late-2026 fields of a function or custom tool: `defer_loading` (tool search)
    served and echoed; a function's `output_schema` (a description of its output) echoed;
    programmatic callers and asynchronous outputs refused by name, never dropped."""
    if opt_bool(tool, "defer_loading", path):
        out["defer_loading"] = True
    if out["type"] == "function" and tool.get("output_schema") is not None:
        out["output_schema"] = expect_object(tool["output_schema"], at(path, "output_schema"))
    _direct_only(tool, path)
    return out


def _direct_only(tool: dict[str, Any], path: str) -> None:
    """Programmatic callers and asynchronous outputs: refused by name (any tool type)."""
    callers = tool.get("allowed_callers")
    if callers is not None:
        where = at(path, "allowed_callers")
        for i, caller in enumerate(expect_list(callers, where)):
            if one_of(caller, ("direct", "programmatic"), at(where, i)) == "programmatic":
                raise bad(at(where, i), "Programmatic tool calling is not run by this server: "
                                        "leave 'programmatic' out of 'allowed_callers'.")
    if opt_bool(tool, "async", path):
        raise bad(at(path, "async"), "Asynchronous tool outputs are not supported by this "
                                     "server: leave 'async' out or false.")


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
    """`tool_choice`, checked against the tools that are offered. Forcing a hosted tool the
    proxy does not run is a 400 whatever `--hosted-tools` says; one it runs (among `tools`) is
    kept as given, and the tool loop asks the model for that call."""
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
    if _hosted(kind) and any(t["type"] == kind for t in tools):
        return {"type": kind}
    if _hosted(kind) or kind == "mcp":
        raise bad("tool_choice.type", f"`tool_choice` forces the hosted tool {kind!r}, which this "
                                 "server does not run (hosted tools are left out of the "
                                 "request).")
    raise bad("tool_choice.type", f"Tool choice type {kind!r} is not supported: {_SUPPORTED}.")


def _hosted(kind: Any) -> bool:
    """A hosted tool's type; a `type` of the wrong JSON type (an object: unhashable) is not
    one, and is refused below as an unsupported type rather than raising here."""
    return isinstance(kind, str) and kind in HOSTED_TYPES


def _allowed(choice: dict[str, Any], names: ToolNames) -> dict[str, Any]:
    mode = one_of(choice.get("mode"), ("auto", "required"), "tool_choice.mode")
    allowed = expect_list(choice.get("tools"), "tool_choice.tools")
    picked: list[dict[str, Any]] = []
    runnable = 0
    for i, raw in enumerate(allowed):
        path = at("tool_choice.tools", i)
        entry = expect_object(raw, path)
        kind = entry.get("type")
        if _hosted(kind):
            picked.append({"type": kind})  # allowed, never offered: the proxy cannot run it
            continue
        if kind == "mcp":  # the proxy runs it (core/mcp.py): every tool of that server
            picked.append({"type": kind, "server_label": req_str(entry, "server_label", path)})
            runnable += 1
            continue
        if kind == toolsearch.TOOL_TYPE and names.search is not None:
            picked.append({"type": kind})  # its search function (core/tools/toolnames.py)
            runnable += 1
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
