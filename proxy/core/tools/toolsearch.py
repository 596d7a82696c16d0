"""Tool search: tools the model does not see until it looks for them. Pure.

A function tool (or a namespace member) with `defer_loading: true` is left out of the chat
request. A `tool_search` tool gives the model one function of the proxy's own (named by
core/tools/toolnames.py `ToolNames.search`); when the model calls it the response shows a
`tool_search_call` item, and then:

    execution "server" (the default): the tool loop (services/generation/toolloop.py) ranks the
        deferred tools against the call's query (`rank`: words of the names, descriptions and
        parameter names; no model, no I/O), adds a `tool_search_output` item carrying the
        definitions found, and the next upstream turns offer them;
    execution "client": the response ends with the call; the client answers with a
        `tool_search_output` input item carrying the definitions it chose.

Either way a `tool_search_output` item in the history (this response's, the chain's, the
conversation's) loads its tools for every later turn (`loaded_tools`): the chain keeps what was
found without the client sending anything again.

The work is bounded: at most `MAX_DEFERRED` deferred tools a request (they do not count against
the per-request tool limit until loaded), each ranked on at most `RANKED_CHARS` of its text, so
a search costs at most MAX_DEFERRED * RANKED_CHARS characters of tokenizing, whatever the body.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.types import Item

TOOL_TYPE = "tool_search"
CALL = "tool_search_call"
OUTPUT = "tool_search_output"
ITEM_TYPES = frozenset({CALL, OUTPUT})
# An input item (role `developer`) whose tools are offered from where it stands on.
ADDITIONAL_TOOLS = "additional_tools"
CALL_PREFIX = "tsc"
OUTPUT_PREFIX = "tso"
EXECUTIONS = ("server", "client")

# Deferred tools one request may carry (top-level functions and namespace members together).
MAX_DEFERRED = 2048
# The characters of one tool's text (name, description, parameter names) a search reads.
RANKED_CHARS = 2048
# Tools one server-run search loads, at most (the model may search again).
MAX_FOUND = 5
# The model-facing function of a server-run search (a client-run one may bring its own).
DESCRIPTION = ("Search for more tools. {count} more tools are available but not loaded; "
               "describe the task or the tool you need, and the best matches become "
               "callable from your next step.")
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string",
                             "description": "What the tool should do, in a few words."}},
    "required": ["query"]}

_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[0-9]+")
# Words that say nothing about what a tool does.
_STOP = frozenset({"the", "and", "for", "with", "from", "that", "this", "tool", "tools", "use",
                   "get", "set", "can", "you", "your", "are", "will", "into", "when", "which",
                   "what", "any", "all", "has", "not", "its", "also", "given", "returns"})


def is_deferred(tool: dict[str, Any]) -> bool:
    """A function or custom tool marked `defer_loading` (a namespace: any of its members)."""
    if tool.get("type") == "namespace":
        return any(m.get("defer_loading") is True for m in tool.get("tools") or ())
    return tool.get("type") in ("function", "custom") and tool.get("defer_loading") is True


def search_tool(tools: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    return next((t for t in tools if t.get("type") == TOOL_TYPE), None)


def execution(tool: dict[str, Any] | None) -> str:
    return str((tool or {}).get("execution") or "server")


def offered_now(tool: dict[str, Any]) -> dict[str, Any] | None:
    """The part of a request tool the model sees before any search (None: nothing)."""
    if tool.get("type") == "namespace":
        members = [m for m in tool["tools"] if m.get("defer_loading") is not True]
        return {**tool, "tools": members} if members else None
    return None if is_deferred(tool) else tool


@dataclass(frozen=True, slots=True)
class Entry:
    """One deferred tool as a search sees it: its definition and its namespace (and that
    namespace's description). Its words are read when a search ranks it, one entry at a time:
    kept for the whole catalogue they cost ~25x the tools' text in sets of small strings (a
    1 MiB body of deferred tools held ~18 MiB of them for the response's life)."""

    tool: dict[str, Any]
    namespace: str | None
    namespace_description: str
    parent: dict[str, Any] | None = None

    @property
    def words(self) -> frozenset[str]:
        return _words(self.tool, self.parent)


def searchable(tools: Iterable[dict[str, Any]], items: Iterable[Item]) -> list[dict[str, Any]]:
    """The tools a search looks among: the request's, then those `additional_tools` items
    brought (their deferred ones are found like the request's)."""
    out = list(tools)
    for item in items:
        if item.get("type") == ADDITIONAL_TOOLS:
            out += item.get("tools") or ()
    return out


def count_deferred(tools: Iterable[dict[str, Any]]) -> int:
    """How many tools of the list wait for a search (namespace members one by one)."""
    count = 0
    for tool in tools:
        if tool.get("type") == "namespace":
            count += sum(1 for m in tool.get("tools") or () if m.get("defer_loading") is True)
        elif is_deferred(tool):
            count += 1
    return count


def catalogue(tools: Iterable[dict[str, Any]]) -> list[Entry]:
    """The deferred tools of a tool list, in order, their words read."""
    out: list[Entry] = []
    for tool in tools:
        if tool.get("type") == "namespace":
            for member in tool.get("tools") or ():
                if member.get("defer_loading") is True:
                    out.append(Entry(member, tool["name"], tool.get("description") or "", tool))
        elif is_deferred(tool):
            out.append(Entry(tool, None, ""))
    return out


def _words(tool: dict[str, Any], namespace: dict[str, Any] | None) -> frozenset[str]:
    """Each part cut before it is joined: no more than RANKED_CHARS are copied either."""
    parts = [str(tool.get("name") or ""), str((namespace or {}).get("name") or ""),
             str(tool.get("description") or "")[:RANKED_CHARS]]
    parameters = tool.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    size = sum(map(len, parts))
    for key in properties if isinstance(properties, dict) else ():
        if size >= RANKED_CHARS:
            break
        parts.append(str(key)[:RANKED_CHARS])
        size += len(parts[-1]) + 1
    return terms(" ".join(parts)[:RANKED_CHARS])


def terms(text: str) -> frozenset[str]:
    """The words of `text` a search compares: lower-cased, camelCase and snake_case split,
    short words (not numbers) and empty ones left out, a plural's `s` dropped."""
    out: set[str] = set()
    for word in _WORD.findall(text):
        word = word.lower()
        if (len(word) < 3 and not word.isdigit()) or word in _STOP:
            continue
        out.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return frozenset(out)


def rank(query: str, entries: list[Entry], limit: int = MAX_FOUND) -> list[Entry]:
    """The entries that share most words with `query` (a word of the tool's name counts
    twice), best first, ties in request order; none shares a word: none found."""
    asked = terms(query[:RANKED_CHARS])
    if not asked:
        return []
    # Only the best `limit` are kept while the entries are read (a bounded heap, not a list
    # of every match): memory is one entry's words whatever the catalogue's size.
    best: list[tuple[int, int, Entry]] = []  # (score, -position): the heap's head is the worst
    for position, entry in enumerate(entries):
        shared = asked & entry.words
        if not shared:
            continue
        named = terms(str(entry.tool.get("name") or "")) | terms(entry.namespace or "")
        score = len(shared) + len(shared & named)
        if len(best) < limit:
            heapq.heappush(best, (score, -position, entry))
        elif (score, -position) > best[0][:2]:
            heapq.heapreplace(best, (score, -position, entry))
    return [entry for _, _, entry in sorted(best, key=lambda s: (-s[0], -s[1]))]


def definitions(found: list[Entry]) -> list[dict[str, Any]]:
    """What a `tool_search_output` carries: the functions found, namespace members grouped
    under their namespace (`ToolSearchOutputNamespaceTool`), in the order found."""
    out: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    for entry in found:
        if entry.namespace is None:
            out.append(entry.tool)
            continue
        group = groups.get(entry.namespace)
        if group is None:
            group = groups[entry.namespace] = {"type": "namespace", "name": entry.namespace,
                                               "description": entry.namespace_description,
                                               "tools": []}
            out.append(group)
        group["tools"].append(entry.tool)
    return out


def loaded_tools(items: Iterable[Item]) -> list[dict[str, Any]]:
    """The tools every `tool_search_output` and `additional_tools` item of `items` brought,
    in order (a tool loaded twice once; an `additional_tools` item's deferred ones not)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in items:
        if item.get("type") not in (OUTPUT, ADDITIONAL_TOOLS):
            continue
        brought = item.get("tools") or ()
        if item["type"] == ADDITIONAL_TOOLS:  # its deferred tools wait for a search
            brought = [shown for shown in map(offered_now, brought) if shown is not None]
        for tool in brought:
            key = orjson.dumps(tool, option=orjson.OPT_SORT_KEYS).decode()
            if key not in seen:
                seen.add(key)
                out.append(tool)
    return out


def answer(tools: list[dict[str, Any]]) -> str:
    """What the model reads as the search's result: the tools now callable."""
    if not tools:
        return "No tools matched; try other words, or answer without them."
    lines = ["These tools are loaded and can be called now:"]
    for tool in tools:
        if tool.get("type") == "namespace":
            lines += [f"- {tool['name']}.{m['name']}: {_short(m)}" for m in tool["tools"]]
        else:
            lines.append(f"- {tool.get('name')}: {_short(tool)}")
    return "\n".join(lines)


def _short(tool: dict[str, Any]) -> str:
    text = str(tool.get("description") or "").strip()
    return text if len(text) <= 200 else text[:197] + "..."


def chat_function(tool: dict[str, Any] | None, name: str, count: int) -> dict[str, Any]:
    """The search function the model sees: a client-run search's own description and
    parameters when it gave them, else the proxy's."""
    tool = tool or {}
    own = execution(tool) == "client"
    description = tool.get("description") if own and tool.get("description") else \
        DESCRIPTION.format(count=count)
    parameters = tool.get("parameters") if own and isinstance(tool.get("parameters"), dict) \
        else PARAMETERS
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": parameters}}


def query_of(arguments: Any) -> str:
    """The words a call's arguments search for (every string value, for a client's own
    parameters)."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        return " ".join(query_of(v) for v in arguments.values())
    if isinstance(arguments, list):
        return " ".join(query_of(v) for v in arguments)
    return ""


def arguments_object(text: str) -> Any:
    """A call's arguments as the item shows them: the JSON the model wrote, or {} if none."""
    try:
        return orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}


def call_item(item_id: str, call_id: str, arguments: str, execution_: str,
              status: str) -> Item:
    return {"id": item_id, "type": CALL, "status": status, "execution": execution_,
            "call_id": call_id, "arguments": arguments_object(arguments)}


def output_item(item_id: str, call_id: str, tools: list[dict[str, Any]],
                execution_: str = "server") -> Item:
    return {"id": item_id, "type": OUTPUT, "status": "completed", "execution": execution_,
            "call_id": call_id, "tools": tools}

