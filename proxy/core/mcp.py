"""MCP tools run by the proxy (docs/contract.md "MCP tools"): the pure parts. No I/O.

    tool {"type": "mcp", server_label, server_url, headers?, authorization?, allowed_tools?,
          require_approval?}
        ─ parse_mcp_tool ─▶ McpServer (what the loop needs, headers included)
                           + its echo (what the Response object shows: never the headers)

- Allow-list (an SSRF surface, core/policy/urlpolicy.py): a `server_url` is taken in normal form (no
  dot segments, no encoded separators, no user info) and must be admitted by one of
  `--mcp-allow`'s prefixes, compared by scheme, host, port and whole path segments:
  `http://tools.corp` does not admit `http://tools.corp.evil.com`, and a bare host prefix
  (`http://tools.corp`, `http://127.0.0.1:`) admits that host on any port. With no prefix
  configured every MCP tool is a 400 saying how to enable it. The name is resolved once by the
  client adapter (proxy/services/tools/mcpclient.py, through upstream/egress.py) and the
  connection goes to the address vetted: a private, loopback or link-local one only when the
  admitting prefix names that host as an IP literal or `localhost`.
- Tool `headers` go to the MCP server; `Host` and the hop-by-hop headers are refused (they
  would re-aim or re-frame the request our HTTP client makes).
- Names upstream: an MCP tool is offered to the model as a function of its own name when no
  other offered tool has it, else as `<server_label>__<name>` (`upstream_names`); the loop maps
  a call back to (server, tool).
- Items (the SDK's types are the schema): `mcp_list_tools`, `mcp_call` (`output` or `error`),
  `mcp_approval_request`, and the input-only `mcp_approval_response`. In a history they reach
  the model as the assistant's tool call plus the tool's answer (`mcp_messages`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from proxy.core.errors import InvalidRequest
from proxy.core.ids import IdFactory
from proxy.core.policy.urlpolicy import UrlRefused, check, parse_prefix
from proxy.core.request.fields import (
    at,
    bad,
    expect_list,
    expect_object,
    expect_str,
    opt_str,
    req_str,
)
from proxy.core.types import Item

MCP = "mcp"
LIST_TOOLS = "mcp_list_tools"
CALL = "mcp_call"
APPROVAL_REQUEST = "mcp_approval_request"
APPROVAL_RESPONSE = "mcp_approval_response"
ITEM_TYPES = frozenset({LIST_TOOLS, CALL, APPROVAL_REQUEST, APPROVAL_RESPONSE})
ID_PREFIX = {LIST_TOOLS: "mcpl", CALL: "mcp", APPROVAL_REQUEST: "mcpr",
             APPROVAL_RESPONSE: "mcpa"}

# Events (the SDK's response_mcp_* types).
LIST_IN_PROGRESS = "response.mcp_list_tools.in_progress"
LIST_COMPLETED = "response.mcp_list_tools.completed"
LIST_FAILED = "response.mcp_list_tools.failed"
CALL_IN_PROGRESS = "response.mcp_call.in_progress"
CALL_COMPLETED = "response.mcp_call.completed"
CALL_FAILED = "response.mcp_call.failed"
ARGS_DELTA = "response.mcp_call_arguments.delta"
ARGS_DONE = "response.mcp_call_arguments.done"

SEPARATOR = "__"
SERVER_ERROR = "mcp_server_error"  # a server could not be listed: a JSON create's 424 code
DENIED = "The user denied this tool call; it was not run."
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# Headers a tool may not set: `Host` re-aims the request at another virtual host, the others
# belong to one hop (RFC 9110 §7.6.1) or frame the body our client writes.
REFUSED_HEADERS = frozenset({
    "host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
    "trailer", "upgrade", "proxy-authorization", "proxy-authenticate", "content-length"})
_ENABLE = ("MCP tools are not enabled on this server: start it with --mcp-allow PREFIX "
           "(env PROXY_MCP_ALLOW) naming the MCP server URLs it may call.")


@dataclass(frozen=True, slots=True)
class McpServer:
    """One `mcp` tool of a request, as the loop runs it."""

    label: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    allowed: tuple[str, ...] | None = None  # None: every tool the server lists
    read_only_only: bool = False  # allowed_tools {read_only: true}
    approval: Any = "always"  # "always" | "never" | {"always"?: filter, "never"?: filter}
    private_ok: bool = False  # the admitting prefix names a private address explicitly

    def to_spec(self) -> dict[str, Any]:
        """For a background job's spec (the worker rebuilds it with `from_spec`)."""
        return {"label": self.label, "url": self.url, "headers": self.headers,
                "allowed": list(self.allowed) if self.allowed is not None else None,
                "read_only_only": self.read_only_only, "approval": self.approval,
                "private_ok": self.private_ok}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> McpServer:
        allowed = spec.get("allowed")
        return cls(spec["label"], spec["url"], dict(spec.get("headers") or {}),
                   tuple(allowed) if allowed is not None else None,
                   bool(spec.get("read_only_only")), spec.get("approval", "always"),
                   bool(spec.get("private_ok")))

    def offers(self, tool: dict[str, Any]) -> bool:
        """Whether `allowed_tools` lets the model see this listed tool."""
        if self.allowed is not None and tool["name"] not in self.allowed:
            return False
        return not self.read_only_only or _read_only(tool)

    def needs_approval(self, tool: dict[str, Any] | None, name: str) -> bool:
        rule = self.approval
        if rule == "never":
            return False
        if rule == "always":
            return True
        read_only = tool is not None and _read_only(tool)
        if _matches(rule.get("never"), name, read_only):
            return False
        if _matches(rule.get("always"), name, read_only):
            return True
        return True  # OpenAI's default: a tool no filter names needs approval


def _read_only(tool: dict[str, Any]) -> bool:
    annotations = tool.get("annotations") or {}
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True


def _matches(rule: Any, name: str, read_only: bool) -> bool:
    if not isinstance(rule, dict):
        return False
    names = rule.get("tool_names")
    if names is not None and name in names:
        return True
    return rule.get("read_only") is True and read_only


# -- parsing the tool -------------------------------------------------------------------------
def parse_mcp_tool(tool: dict[str, Any], path: str,
                   allow: tuple[str, ...]) -> tuple[dict[str, Any], McpServer]:
    """(the echoed tool, the server to run). 400s name the field."""
    if not allow:
        raise bad(at(path, "type"), _ENABLE)
    label = req_str(tool, "server_label", path)
    if len(label) > 64 or not set(label) <= _LABEL_CHARS:
        raise bad(at(path, "server_label"), f"Invalid '{at(path, 'server_label')}': use at "
                                            "most 64 letters, digits, '_' or '-'.")
    if tool.get("connector_id") is not None:
        raise bad(at(path, "connector_id"), "OpenAI's connectors are not served here; give a "
                                            "`server_url`.")
    url_path = at(path, "server_url")
    url = req_str(tool, "server_url", path)
    try:
        target, prefix = check(url, tuple(parse_prefix(p) for p in allow), "--mcp-allow")
    except UrlRefused as exc:
        raise bad(url_path, f"MCP server URL {url!r} is refused: {exc}.") from None
    headers = _headers(tool.get("headers"), at(path, "headers"))
    authorization = opt_str(tool, "authorization", path)
    if authorization:
        headers.setdefault("Authorization", f"Bearer {authorization}")
    allowed, read_only = _allowed_tools(tool.get("allowed_tools"), at(path, "allowed_tools"))
    approval = _approval(tool.get("require_approval"), at(path, "require_approval"))
    echo: dict[str, Any] = {"type": MCP, "server_label": label, "server_url": url,
                            "allowed_tools": tool.get("allowed_tools"),
                            "require_approval": approval}
    if tool.get("server_description") is not None:
        echo["server_description"] = opt_str(tool, "server_description", path)
    server = McpServer(label, target.url, headers, allowed, read_only, approval,
                       private_ok=prefix.private_ok)
    return echo, server


def _headers(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    headers = expect_object(value, path)
    out: dict[str, str] = {}
    for key, item in headers.items():
        text = expect_str(item, at(path, key))
        if any(c in key + text for c in "\r\n") or not key:
            raise bad(at(path, key), f"Invalid '{at(path, key)}': header names and values "
                                     "cannot hold line breaks.")
        if key.lower() in REFUSED_HEADERS:
            raise bad(path, f"Invalid '{path}': the {key!r} header cannot be set (Host and "
                            "hop-by-hop headers are the proxy's own).")
        out[key] = text
    return out


def _allowed_tools(value: Any, path: str) -> tuple[tuple[str, ...] | None, bool]:
    if value is None:
        return None, False
    if isinstance(value, list):
        return tuple(expect_str(v, at(path, i)) for i, v in enumerate(value)), False
    rule = expect_object(value, path)
    names = rule.get("tool_names")
    picked = (tuple(expect_str(v, at(path, f"tool_names[{i}]"))
                    for i, v in enumerate(expect_list(names, at(path, "tool_names"))))
              if names is not None else None)
    return picked, rule.get("read_only") is True


def _approval(value: Any, path: str) -> Any:
    if value is None:
        return "always"  # OpenAI's default
    if value in ("always", "never"):
        return value
    if not isinstance(value, dict):
        raise bad(path, f"Invalid '{path}': expected 'always', 'never' or an object with "
                        "'always' and/or 'never'.")
    out: dict[str, Any] = {}
    for key in ("always", "never"):
        if value.get(key) is not None:
            rule = expect_object(value[key], at(path, key))
            names = rule.get("tool_names")
            out[key] = {"tool_names": [expect_str(n, at(path, f"{key}.tool_names[{i}]"))
                                       for i, n in enumerate(
                                           expect_list(names, at(path, f"{key}.tool_names")))]
                        if names is not None else None,
                        "read_only": rule.get("read_only") is True}
    return out


# -- names upstream ---------------------------------------------------------------------------
def upstream_names(taken: Iterable[str],
                   listings: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[str, str]]:
    """Upstream function name → (server_label, tool name) for every offered MCP tool."""
    taken = set(taken)
    count: dict[str, int] = {}
    for tools in listings.values():
        for tool in tools:
            count[tool["name"]] = count.get(tool["name"], 0) + 1
    out: dict[str, tuple[str, str]] = {}
    for label, tools in listings.items():
        for tool in tools:
            name = tool["name"]
            flat = name if count[name] == 1 and name not in taken else \
                f"{label}{SEPARATOR}{name}"
            out[flat] = (label, name)
    return out


def offered_by_choice(choice: str | dict[str, Any],
                      labels: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """(the servers whose tools the model may call, the chat tool_choice mode) under the
    request's `tool_choice`: `none` offers none, a forced client function none either,
    `allowed_tools` the servers it names (`{"type": "mcp", "server_label"}` entries)."""
    if choice == "none":
        return (), "none"
    if isinstance(choice, str):
        return labels, choice
    if choice.get("type") == "allowed_tools":
        named = {e.get("server_label") for e in choice["tools"] if e.get("type") == MCP}
        return tuple(label for label in labels if label in named), choice["mode"]
    return (), "auto"


def chat_function(flat: str, tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": flat,
                                "parameters": tool.get("input_schema") or
                                {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


# -- items ------------------------------------------------------------------------------------
def list_tools_item(item_id: str, label: str, tools: list[dict[str, Any]],
                    error: str | None = None) -> Item:
    item: Item = {"id": item_id, "type": LIST_TOOLS, "server_label": label, "tools": tools}
    if error is not None:
        item["error"] = error
    return item


def listed_tool(name: str, description: str | None, schema: Any,
                annotations: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": schema,
            "annotations": annotations}


def listed_in(items: Iterable[Item]) -> dict[str, list[dict[str, Any]]]:
    """server_label → tools, from a chain's `mcp_list_tools` items (the newest wins): a server
    listed earlier in the chain is not listed again (OpenAI does the same)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if item.get("type") == LIST_TOOLS and not item.get("error"):
            out[item["server_label"]] = list(item.get("tools") or [])
    return out


@dataclass(frozen=True, slots=True)
class Approved:
    """An `mcp_approval_response` that says yes, with the call it approves."""

    request_id: str
    label: str
    name: str
    arguments: str


def approvals(new_input: list[Item], history: list[Item],
              servers: dict[str, McpServer]) -> list[Approved]:
    """The approved calls to run before the model's first turn. An answer to a request this
    chain never made, or for a server the request no longer offers, is a 400."""
    requests = {i["id"]: i for i in history if i.get("type") == APPROVAL_REQUEST}
    out: list[Approved] = []
    for index, item in enumerate(new_input):
        if item.get("type") != APPROVAL_RESPONSE:
            continue
        where = at(at("input", index), "approval_request_id")
        request = requests.get(item["approval_request_id"])
        if request is None:
            raise InvalidRequest(f"No mcp_approval_request with id "
                                 f"{item['approval_request_id']!r} in this response chain.",
                                 param=where)
        if request["server_label"] not in servers:
            raise InvalidRequest(f"The approved call is for MCP server "
                                 f"{request['server_label']!r}, which is not among `tools`.",
                                 param=where)
        if item["approve"]:
            out.append(Approved(request["id"], request["server_label"], request["name"],
                                request["arguments"]))
    return out


def parse_mcp_item(item: dict[str, Any], ids: IdFactory, path: str) -> Item:
    """An MCP item sent back as input (a stateless client replays its output)."""
    kind = item["type"]
    given = opt_str(item, "id", path, max_len=256)
    out: Item = {"id": given or ids(ID_PREFIX[kind]), "type": kind}
    if kind == APPROVAL_RESPONSE:
        out["approval_request_id"] = req_str(item, "approval_request_id", path)
        approve = item.get("approve")
        if not isinstance(approve, bool):
            raise bad(at(path, "approve"), f"Invalid '{at(path, 'approve')}': expected a "
                                           "boolean.")
        out["approve"] = approve
        if item.get("reason") is not None:
            out["reason"] = opt_str(item, "reason", path)
        return out
    out["server_label"] = req_str(item, "server_label", path)
    if kind == LIST_TOOLS:
        out["tools"] = [expect_object(t, at(at(path, "tools"), i))
                        for i, t in enumerate(expect_list(item.get("tools") or [],
                                                          at(path, "tools")))]
        if item.get("error") is not None:
            out["error"] = opt_str(item, "error", path)
        return out
    out["name"] = req_str(item, "name", path)
    out["arguments"] = req_str(item, "arguments", path, nonempty=False)
    if kind == CALL:
        out["output"] = opt_str(item, "output", path)
        out["error"] = item.get("error")
        out["status"] = opt_str(item, "status", path) or "completed"
        if item.get("approval_request_id") is not None:
            out["approval_request_id"] = opt_str(item, "approval_request_id", path)
    return out


def error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("content") or error)
    return str(error)


def mcp_messages(item: Item, messages: list[dict[str, Any]]) -> None:
    """Add an MCP history item to chat messages: a call or approval request as the assistant's
    tool call (joined to the assistant message before it), its result or refusal as a `tool`
    message. A call that ran on approval answers the request's tool call."""
    kind = item["type"]
    if kind in (CALL, APPROVAL_REQUEST):
        approved = item.get("approval_request_id") if kind == CALL else None
        if not approved:
            _assistant(messages).setdefault("tool_calls", []).append({
                "id": item["id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"] or "{}"}})
        if kind == CALL:
            content = item.get("output")
            if content is None:
                content = f"Error: {error_text(item.get('error') or 'no output')}"
            messages.append({"role": "tool", "tool_call_id": approved or item["id"],
                             "content": content})
    elif kind == APPROVAL_RESPONSE and not item["approve"]:
        reason = item.get("reason")
        messages.append({"role": "tool", "tool_call_id": item["approval_request_id"],
                         "content": DENIED + (f" Reason: {reason}" if reason else "")})


def _assistant(messages: list[dict[str, Any]]) -> dict[str, Any]:
    if messages and messages[-1]["role"] == "assistant":
        return messages[-1]
    message: dict[str, Any] = {"role": "assistant", "content": ""}  # not null: vLLM 0.10.1
    messages.append(message)
    return message


def bound_text(text: str, limit: int) -> str:
    """At most `limit` bytes of UTF-8 (a tool's output reaches the model and the store)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore") + "\n[output truncated]"
