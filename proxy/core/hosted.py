"""Hosted tools the proxy runs itself (docs/contract.md "Files, vector stores, hosted tools"): the
pure parts every such tool shares. No I/O.

A hosted tool (`web_search`, `file_search`, `code_interpreter`) is offered to the model as one
function of the proxy's own, named so it cannot clash with the client's tools or the MCP ones
(`function_name`). When the model calls it, the tool loop (services/generation/toolloop.py) runs
it between two upstream turns, as it runs MCP calls, and the response shows the tool's own item
(`web_search_call`, ...) with its own events instead of a function call:

    output_item.added {status in_progress}, <kind>.in_progress     (the call's arguments whole)
    <kind>_<field>.delta, <kind>_<field>.done                      (`streamed`: code_interpreter's
                                                                    code, whole, in one delta)
    <kind>.searching | interpreting                                (the tool runs)
    <kind>.completed, output_item.done {status completed|failed}   (its result)

Each tool is a `HostedKind` in `KINDS`, its whole description: its item and events, the function
the model sees, the request tool's options (`parse`: checked, echoed), the `include` value that
shows more of its item, and, for a kind an operator's MCP server serves, how that server's
answer becomes the item (`answer`). Its runner (the I/O) lives in services/tools/. What it found
is numbered [1]..[n] for the model, and the answer's citations of those numbers
(core/tools/citations.py) become annotations on the answer's text. A tool that fails still ends with
its `completed` event (the SDK has no `failed` event for these items): its item says `failed`.

Adding one: a `HostedKind` here and its runner (services/tools/: its own module, or
services/tools/mcphosted.py for a kind an MCP server serves) built in runtime.py from its
settings. The loop, the assembler, restore, replay, the request parsing and `include` need
nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.ids import IdFactory
from proxy.core.request.fields import at, bad, expect_object, opt_str
from proxy.core.types import Item

_STATUSES = ("in_progress", "searching", "completed", "failed", "incomplete")


@dataclass(frozen=True, slots=True)
class Source:
    """One thing a tool found, as the answer may cite it: its number ([n]), the annotation a
    citation of it becomes (without its span), and texts whose verbatim use in the answer cites
    it too (its URL, its title, its sentences)."""

    number: int
    annotation: dict[str, Any]
    texts: tuple[str, ...] = ()
    # How a citation is placed: "span" (`start_index`/`end_index`, url_citation) or "index"
    # (one `index`, where the citation ends: file_citation).
    placement: str = "span"


@dataclass(frozen=True, slots=True)
class HostedResult:
    """A run's outcome: the item's own fields (merged into the item), the text the model reads
    as the tool's answer, what it may cite, and whether it failed."""

    fields: dict[str, Any]
    output: str
    sources: tuple[Source, ...] = ()
    failed: bool = False


@dataclass(frozen=True, slots=True)
class HostedCall:
    """What a runner needs of the response beside the model's arguments: whose it is (a
    file_search searches that key's stores only) and the request's options for its kind
    (`LoopPlan.options`: file_search's vector_store_ids, max_num_results, filters, ...)."""

    tenant: str = ""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HostedKind:
    """One hosted tool. `tool_types`: the request's tool types it serves; `item`: the item as
    (id, status, the call's arguments as JSON text) make it before it ran; `events`: its
    in_progress, running (searching, interpreting) and completed event types."""

    name: str  # the function's preferred name upstream
    tool_types: frozenset[str]
    item_type: str
    id_prefix: str
    events: tuple[str, str, str]
    description: str
    parameters: dict[str, Any]
    item: Callable[[str, str, str], Item] = field(repr=False)
    input_fields: tuple[str, ...] = ()  # object (or list) fields an input item of this kind keeps
    input_texts: tuple[str, ...] = ()  # and its string fields
    # The request tool's options, checked (a 400 naming the field) and as the Response echoes
    # the tool; None: the kind has none beyond `echo_tool`'s.
    parse: Callable[[dict[str, Any], str], dict[str, Any]] | None = field(default=None,
                                                                         repr=False)
    # The item's text field streamed as `response.<item_type>_<field>.delta|done` events once
    # the call's arguments are whole (code_interpreter's `code`); None: none.
    streamed: str | None = None
    # The request's `include` value that shows more of the item (file_search_call.results): the
    # run's options carry `include_results` saying whether the request asked for it.
    include: str | None = None
    # For a kind an operator's MCP server serves (services/tools/mcphosted.py): the server's
    # answer (its text, whether the tool failed, the run's options) as the result.
    answer: Callable[[str, bool, dict[str, Any]], HostedResult] | None = field(default=None,
                                                                              repr=False)

    @property
    def event_types(self) -> frozenset[str]:
        """Every event type about this kind's item but the item's own added/done."""
        return frozenset(self.events) | frozenset(t for t, _ in streamed_events(self, {}))

    def chat_function(self, name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": self.description,
                                                 "parameters": self.parameters}}


def arguments_of(text: str) -> dict[str, Any]:
    """The call's arguments as an object ({} when the model sent no object)."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def function_name(kind: HostedKind, taken: Iterable[str]) -> str:
    """The kind's name upstream: its own when free, else `<name>_2`, `_3`, ..."""
    taken = set(taken)
    name, n = kind.name, 1
    while name in taken:
        n += 1
        name = f"{kind.name}_{n}"
    return name


def hosted_by_choice(choice: str | dict[str, Any],
                     kinds: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """(the hosted kinds the model may call under the request's `tool_choice`, `kinds` by
    name; the chat tool_choice mode when the choice forces one of them, else None): `none`
    offers none, a forced client function none either, `allowed_tools` the ones whose tool
    type it names, a forced hosted tool that one alone (`required`)."""
    if choice == "none":
        return (), None
    if isinstance(choice, str):
        return kinds, None
    if choice.get("type") == "allowed_tools":
        named = {e.get("type") for e in choice["tools"]}
        return tuple(k for k in kinds if KINDS[k].tool_types & named), None
    forced = kind_of_type(str(choice.get("type")))
    if forced is not None and forced.name in kinds:
        return (forced.name,), "required"
    return (), None


def kind_of_type(tool_type: str) -> HostedKind | None:
    """The hosted kind that serves a request's tool type."""
    return next((k for k in KINDS.values() if tool_type in k.tool_types), None)


def kind_of_item(item_type: Any) -> HostedKind | None:
    """The hosted kind whose item has this type."""
    return next((k for k in KINDS.values() if k.item_type == item_type), None)


def streamed_events(kind: HostedKind, item: Item) -> list[tuple[str, dict[str, Any]]]:
    """The events (type, fields) that stream the kind's `streamed` field of `item` once its
    arguments are whole: one delta with the whole text (the arguments stream silently: a
    field inside JSON text is not known until it is whole), then its done."""
    if kind.streamed is None:
        return []
    text = item.get(kind.streamed)
    text = text if isinstance(text, str) else ""
    stem = f"response.{kind.item_type}_{kind.streamed}"
    return [(f"{stem}.delta", {"delta": text}), (f"{stem}.done", {kind.streamed: text})]


def final_item(kind: HostedKind, item_id: str, arguments: str,
               result: HostedResult | None, status: str) -> Item:
    item = kind.item(item_id, status, arguments)
    if result is not None:
        item.update(result.fields)
    return item


def hosted_messages(call_id: str, name: str, arguments: str, output: str,
                    messages: list[dict[str, Any]]) -> None:
    """A hosted call of this response, for the model's next turn: the assistant's tool call
    (joined to the assistant message before it) and the tool's answer."""
    if messages and messages[-1]["role"] == "assistant":
        assistant = messages[-1]
    else:
        assistant = {"role": "assistant", "content": ""}  # not null: vLLM 0.10.1
        messages.append(assistant)
    assistant.setdefault("tool_calls", []).append({
        "id": call_id, "type": "function",
        "function": {"name": name, "arguments": arguments or "{}"}})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


def parse_hosted_item(item: dict[str, Any], ids: IdFactory, path: str) -> Item:
    """A hosted call's item sent back as input (a stateless client replays its output): kept
    in its own shape, as history. The model is not shown it again (`hosted_messages` is only
    for this response's own calls): the answer that followed it carries what it found."""
    kind = kind_of_item(item["type"])
    assert kind is not None
    given = opt_str(item, "id", path, max_len=256)
    status = item.get("status")
    out = kind.item(given or ids(kind.id_prefix),
                    status if status in _STATUSES else "completed", "{}")
    for key in kind.input_fields:
        value = item.get(key)
        if value is not None:  # (file_search's queries and results are lists)
            out[key] = value if isinstance(value, list) else expect_object(value, at(path, key))
    for key in kind.input_texts:
        if item.get(key) is not None:
            out[key] = opt_str(item, key, path)
    return out


# -- the kinds --------------------------------------------------------------------------------
def _events(item_type: str, running: str = "searching") -> tuple[str, str, str]:
    return (f"response.{item_type}.in_progress", f"response.{item_type}.{running}",
            f"response.{item_type}.completed")


def _query(description: str) -> dict[str, Any]:
    """A search function's parameters: one required query."""
    return {"type": "object", "properties": {"query": {"type": "string",
                                                       "description": description}},
            "required": ["query"]}


def _web_search_item(item_id: str, status: str, arguments: str) -> Item:
    query = arguments_of(arguments).get("query")
    action: dict[str, Any] = {"type": "search"}
    if isinstance(query, str):
        action["query"] = query
    return {"id": item_id, "type": "web_search_call", "status": status, "action": action}


def _search_kind(name: str, tool_types: set[str], prefix: str, where: str, found: str,
                 query: str, item: Callable[[str, str, str], Item], **more: Any) -> HostedKind:
    """A search tool: its item `<name>_call` and that item's events, one `query` parameter, a
    description that asks the model to cite what it found by number."""
    item_type = f"{name}_call"
    return HostedKind(name=name, tool_types=frozenset(tool_types), item_type=item_type,
                      id_prefix=prefix, events=_events(item_type),
                      description=f"Search {where}. Returns numbered {found}s; cite a {found} "
                                  "you use by its number in brackets, e.g. [1].",
                      parameters=_query(query), item=item, **more)


WEB_SEARCH = _search_kind(
    "web_search", {"web_search", "web_search_preview", "web_search_preview_2025_03_11",
                   "web_search_2025_08_26"}, "ws", "the web", "result", "What to search for.",
    _web_search_item, input_fields=("action",))

def _file_search_item(item_id: str, status: str, arguments: str) -> Item:
    query = arguments_of(arguments).get("query")
    return {"id": item_id, "type": "file_search_call", "status": status,
            "queries": [query] if isinstance(query, str) and query else [], "results": None}


# file_search's `max_num_results` bounds (OpenAI's) and the default the proxy uses: each result
# is a chunk of up to ~800 tokens the model reads, so fewer than OpenAI's 20.
MAX_FILE_RESULTS = 50
DEFAULT_FILE_RESULTS = 10


def _file_search_options(tool: dict[str, Any], path: str) -> dict[str, Any]:
    from proxy.core.request.fields import expect_list, expect_str, opt_int, opt_number
    from proxy.core.vectors.filters import parse_filters

    where = at(path, "vector_store_ids")
    ids = expect_list(tool.get("vector_store_ids"), where)
    if not 1 <= len(ids) <= 16:
        raise bad(where, f"Invalid '{where}': expected 1 to 16 vector store ids.")
    store_ids = [expect_str(v, at(where, i)) for i, v in enumerate(ids)]
    limit = opt_int(tool, "max_num_results", path, low=1, high=MAX_FILE_RESULTS)
    ranking: dict[str, Any] | None = None
    if tool.get("ranking_options") is not None:
        node = expect_object(tool["ranking_options"], at(path, "ranking_options"))
        threshold = opt_number(node, "score_threshold", at(path, "ranking_options"),
                               low=0.0, high=1.0)
        ranking = {"ranker": "auto", "score_threshold": threshold or 0.0}
    return {"type": "file_search", "vector_store_ids": store_ids,
            "filters": parse_filters(tool.get("filters"), at(path, "filters")),
            "max_num_results": limit or DEFAULT_FILE_RESULTS, "ranking_options": ranking}


FILE_SEARCH = _search_kind(
    "file_search", {"file_search"}, "fs", "the user's files", "passage",
    "What to look for in the files.", _file_search_item, input_fields=("queries", "results"),
    parse=_file_search_options, include="file_search_call.results")

# code_interpreter, served by an operator's MCP server (`--code-interpreter-mcp`): the proxy
# keeps no containers, so every call's `container_id` is this one name for that server.
MCP_CONTAINER = "cntr_mcp"
_CODE = {"type": "object", "properties": {"code": {
    "type": "string", "description": "The Python code to run."}}, "required": ["code"]}


def _code_item(item_id: str, status: str, arguments: str) -> Item:
    code = arguments_of(arguments).get("code")
    return {"id": item_id, "type": "code_interpreter_call", "status": status,
            "code": code if isinstance(code, str) else None, "container_id": MCP_CONTAINER,
            "outputs": None}


def _code_options(tool: dict[str, Any], path: str) -> dict[str, Any]:
    """The tool as echoed: its `container`, an id or `{"type": "auto", ...}` (required, as
    OpenAI has it; the proxy runs every call on the one configured server whatever it says)."""
    where = at(path, "container")
    container = tool.get("container")
    if isinstance(container, str) and container:
        return {"type": "code_interpreter", "container": container}
    if container is None:
        raise bad(where, f"Missing required parameter: '{where}'.")
    node = expect_object(container, where)
    if node.get("type") != "auto":
        raise bad(at(where, "type"), f"Invalid '{at(where, 'type')}': expected 'auto'.")
    files = node.get("file_ids")
    echo: dict[str, Any] = {"type": "auto"}
    if isinstance(files, list) and all(isinstance(f, str) for f in files):
        echo["file_ids"] = files
    return {"type": "code_interpreter", "container": echo}


def _code_answer(text: str, failed: bool, options: dict[str, Any]) -> HostedResult:
    """What the server's tool printed: the model reads it; the item's `outputs` show it as
    logs only with `include: ["code_interpreter_call.outputs"]` (else null, as OpenAI does)."""
    shown = [{"type": "logs", "logs": text}] if options.get("include_results") else None
    said = f"The code failed: {text}" if failed else text
    return HostedResult({"outputs": shown}, said, failed=failed)


CODE_INTERPRETER = HostedKind(
    name="code_interpreter", tool_types=frozenset({"code_interpreter"}),
    item_type="code_interpreter_call", id_prefix="ci",
    events=_events("code_interpreter_call", "interpreting"),
    description="Run Python code and return what it prints. Use it for arithmetic, data "
                "work and anything best computed; print the values you need.",
    parameters=_CODE, item=_code_item, input_fields=("outputs",),
    input_texts=("code", "container_id"),
    parse=_code_options, streamed="code", include="code_interpreter_call.outputs",
    answer=_code_answer)

# Every hosted kind the proxy can run, by name.
KINDS: Mapping[str, HostedKind] = {WEB_SEARCH.name: WEB_SEARCH, FILE_SEARCH.name: FILE_SEARCH,
                                   CODE_INTERPRETER.name: CODE_INTERPRETER}
ITEM_TYPES = frozenset(k.item_type for k in KINDS.values())
# The `include` values the kinds honour.
INCLUDES = tuple(k.include for k in KINDS.values() if k.include is not None)


def includes(kinds: Iterable[str], include: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per hosted kind of the response that has an `include` value, the run's option saying
    whether the request asked for it (`include_results`)."""
    asked = set(include)
    return {name: {"include_results": KINDS[name].include in asked} for name in kinds
            if KINDS[name].include is not None}


def echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A hosted tool the proxy runs, as the Response echoes it: its type and the options the
    SDK's types know (checked loosely: they only shape what OpenAI would do)."""
    out: dict[str, Any] = {"type": tool["type"]}
    size = tool.get("search_context_size")
    out["search_context_size"] = size if size in ("low", "medium", "high") else "medium"
    return out
