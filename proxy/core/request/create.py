"""`POST /v1/responses` bodies: every field checked, the result one frozen `ResponsesRequest`.

Three kinds of field (docs/contract.md lists what we serve):
- served: read, range-checked, used and echoed in the Response object;
  (`reasoning.summary` adds summary parts, core/events/summaries.py; `truncation: "auto"` drops the
  oldest messages to fit, core/translate/truncation.py)
- accepted hints that change nothing we could get wrong (`service_tier`, `prompt_cache_key`
  (also our replica-affinity key), `prompt_cache_retention`, `safety_identifier`,
  `max_tool_calls` (it bounds only the MCP calls the proxy runs), `text.verbosity`,
  `stream_options.include_obfuscation`): echoed, otherwise ignored;
- features we refuse for a reason (`_WHY_NOT`): a 400 naming them, never silently dropped;
- anything else: ignored and named in `x-proxy-ignored-params` (`--params lenient`, the
  default, core/request/tolerance.py), or a 400 naming it (`strict`).
Tools (function, custom, namespace; hosted ones dropped or refused) are parsed in
core/request/tools.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from proxy.core.hosted import INCLUDES
from proxy.core.ids import IdFactory
from proxy.core.mcp import McpServer
from proxy.core.request.fields import (
    at,
    bad,
    check_metadata,
    expect_list,
    expect_object,
    one_of,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    req_str,
)
from proxy.core.request.items import parse_input
from proxy.core.request.tolerance import Tolerance
from proxy.core.request.tools import ParsedTools, parse_tool_choice, parse_tools
from proxy.core.seal import Sealer
from proxy.core.tools.toolsearch import ADDITIONAL_TOOLS, is_deferred, search_tool
from proxy.core.types import Item

MAX_TOOLS = 128
# `reasoning.effort` values (`max` reaches the fleet as its highest: core/translate/chat.py).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_FORMAT_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# include values we honour: encrypted reasoning (sealed text), image URLs (we keep them) and the
# output text's logprobs (vLLM's, asked for upstream only when included).
LOGPROBS = "message.output_text.logprobs"
# The hosted kinds' own values (core/hosted.py `HostedKind.include`: file_search_call.results ...)
# show more of their items.
INCLUDABLE = ("reasoning.encrypted_content", "message.input_image.image_url", LOGPROBS,
              *INCLUDES)

_SERVED = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
    "reasoning", "max_output_tokens", "temperature", "top_p", "metadata", "user", "store",
    "stream", "stream_options", "background", "previous_response_id", "conversation",
    "include", "truncation", "service_tier", "prompt_cache_key", "prompt_cache_retention",
    "safety_identifier", "max_tool_calls", "top_logprobs",
    "presence_penalty", "frequency_penalty", "client_metadata", "prompt_cache_options",
    "context_management", "prompt",
})
_WHY_NOT = {
    "background_options": "background jobs take no options here",
    "moderation": "this server runs no moderation",
    "image": "image generation is not served by a chat fleet",
    "access_programs": "programmatic tool calling is not implemented",
}


# No `slots`: `evolved` copies the instance's `__dict__` in one call.
@dataclass(frozen=True)
class ResponsesRequest:
    model: str
    input: list[Item]
    instructions: str | None = None
    prompt: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    store: bool = True
    stream: bool = False
    background: bool = False
    previous_response_id: str | None = None
    conversation: str | None = None
    include: tuple[str, ...] = ()
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    max_tool_calls: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    prompt_cache_options: dict[str, Any] | None = None
    top_logprobs: int | None = None  # 0-20; only with `include` LOGPROBS does it reach vLLM
    ignored_params: tuple[str, ...] = ()  # unknown fields a lenient create let through
    dropped_tools: tuple[str, ...] = ()  # hosted tool types left out of the upstream request
    # "auto": drop the oldest items to fit (core/translate/truncation.py)
    truncation: str = "disabled"
    # `context_management: [{"type": "compaction", "compact_threshold": N}]` (core/compaction.py):
    # compact automatically; the threshold None means a share of the model's context.
    auto_compact: bool = False
    compact_threshold: int | None = None
    mcp: tuple[McpServer, ...] = ()  # MCP servers the proxy runs tools of (core/mcp.py)
    hosted: tuple[str, ...] = ()  # hosted tools the proxy runs (core/hosted.py kind names)
    hosted_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # by kind name
    # Image URL → the data: URL the proxy fetched for it (services/fleet/media.py): translation
    # sends vLLM the data, never a URL to fetch; the stored items keep the client's URL.
    media: dict[str, str] = field(default_factory=dict)
    # The tenant's prefix-cache salt (core/policy/tenancy.py), set by the service, never by the
    # body: every chat request made for this create carries it.
    cache_salt: str | None = None

    def evolved(self, **changes: Any) -> ResponsesRequest:
        """`dataclasses.replace`, at a tenth of its cost (~0.8 µs against ~9 with 39 fields,
        ~4.5 for a copy field by field; a create makes two or three): the fields copied in one
        `dict` update, `changes` over them. Nothing is validated in `__init__`, so skipping it
        changes nothing but the time."""
        if not _FIELD_NAMES.issuperset(changes):
            raise TypeError(f"no such field: {sorted(set(changes) - _FIELD_NAMES)}")
        new = object.__new__(ResponsesRequest)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return new

    @property
    def logprobs(self) -> bool:
        """The output text's logprobs were asked for (`include`); `top_logprobs` alone returns
        none, as OpenAI's API does (it answers `logprobs: []`)."""
        return LOGPROBS in self.include

    @property
    def text_format(self) -> dict[str, Any]:
        fmt: dict[str, Any] = self.text["format"]
        return fmt

    def echo(self) -> dict[str, Any]:
        """The request's part of every Response object (docs/protocol.md §1.1: every field present,
        null where there is no value)."""
        return {
            "instructions": self.instructions,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "text": self.text,
            "reasoning": self.reasoning or {"effort": None, "summary": None},
            # Effective values as numbers, never null (the Open Responses schema requires them)
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "presence_penalty": self.presence_penalty or 0.0,
            "frequency_penalty": self.frequency_penalty or 0.0,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "metadata": self.metadata,
            "user": self.user,
            "store": self.store,
            "background": self.background,
            "previous_response_id": self.previous_response_id,
            "conversation": {"id": self.conversation} if self.conversation else None,
            "truncation": self.truncation,
            "top_logprobs": self.top_logprobs or 0,
            # The tier served: "priority" only when the key's grant let it through (the
            # service turns an ungranted ask into "default" before anything is echoed).
            "service_tier": "priority" if self.service_tier == "priority" else "default",
            "prompt_cache_key": self.prompt_cache_key,
            "prompt_cache_retention": self.prompt_cache_retention,
            "prompt_cache_options": self.prompt_cache_options,
            "safety_identifier": self.safety_identifier,
            # The template used (`prompt` on the create: services/responses/prompts.py
            # rendered it into `instructions` before parsing), as OpenAI echoes it.
            "prompt": self.prompt,
            "completed_at": None,  # always present: null until the response completes
        }


_FIELD_NAMES = frozenset(f.name for f in fields(ResponsesRequest))
# Every field in its declared order, with its plain default (None where it has none or is made
# by a factory: `_request` sets those); the factories' fields, made fresh for each request.
_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is MISSING else f.default for f in fields(ResponsesRequest)}
_FACTORIES: tuple[tuple[str, Callable[[], Any]], ...] = tuple(
    (f.name, f.default_factory) for f in fields(ResponsesRequest)
    if f.default_factory is not MISSING)


def parse_request(body: dict[str, Any], ids: IdFactory, *,
                  max_input_items: int = 2048, sealer: Sealer | None = None,
                  tolerance: Tolerance | None = None,
                  mcp_allow: tuple[str, ...] = (),
                  run_hosted: frozenset[str] = frozenset()) -> ResponsesRequest:
    tolerance = tolerance or Tolerance()
    ignored = _refuse_unknown(body, tolerance)
    model = req_str(body, "model")
    if body.get("input") is None:
        raise bad("input", "Missing required parameter: 'input'.")
    store = opt_bool(body, "store")
    background = bool(opt_bool(body, "background"))
    store = True if store is None else store
    if background and not store:
        raise bad("background", "Background mode requires `store` to be true "
                                "(a background response must be stored to be retrieved).")
    previous = opt_str(body, "previous_response_id", max_len=256)
    conversation = _conversation(body.get("conversation"))
    if previous and conversation:
        raise bad("conversation", "`conversation` and `previous_response_id` cannot be used "
                                  "together: a conversation already carries the history.")
    parsed_tools = parse_tools(body.get("tools"), drop_hosted=not tolerance.reject_hosted,
                               max_tools=MAX_TOOLS, mcp_allow=mcp_allow,
                               run_hosted=run_hosted)
    tools = parsed_tools.tools
    parallel = opt_bool(body, "parallel_tool_calls")
    auto_compact, threshold = _context_management(body.get("context_management"))
    if auto_compact and background:
        raise bad("context_management", "'context_management' cannot be used with background "
                                        "mode on this server.")
    inputs = parse_input(body["input"], ids, max_items=max_input_items, sealer=sealer,
                         references=True)
    _deferred_items_need_search(inputs, tools)
    values: dict[str, Any] = {
        "model": model, "input": inputs, "tools": tools, "store": store,
        "background": background, "previous_response_id": previous,
        "conversation": conversation, "ignored_params": ignored,
        "dropped_tools": parsed_tools.dropped, "mcp": parsed_tools.mcp,
        "hosted": parsed_tools.hosted, "hosted_options": parsed_tools.hosted_options,
        "auto_compact": auto_compact, "compact_threshold": threshold,
    }
    if parallel is not None:
        values["parallel_tool_calls"] = parallel
    # Only the fields the body has are read (each absent one is its field's default): a short
    # create names 4 of the 25 below; a call per absent field and the dataclass's `__init__`
    # made its parse 12.2 µs, 6.5 now (tests/unit/test_request.py).
    # In the order of the checks, so the first bad field of several is the one named; only
    # those the body has are looked at (a set operation: no step per absent field).
    present = body.keys() & _OPTIONAL_KEYS
    if present:
        for key in sorted(present, key=_OPTIONAL_ORDER.__getitem__) if len(present) > 1 \
                else present:
            if body[key] is not None:
                values[key] = _OPTIONAL_READERS[key](body, parsed_tools)
    return _request(values)


def _request(values: dict[str, Any]) -> ResponsesRequest:
    """The `ResponsesRequest` of `values`, every other field its default. What the dataclass's
    `__init__` does (nothing is validated there) without its 41 `object.__setattr__` calls of a
    frozen class: ~1 µs against ~6. The fields stay in their declared order (`vars`, `repr`)."""
    new = object.__new__(ResponsesRequest)
    state = new.__dict__
    state.update(_DEFAULTS)
    for name, make in _FACTORIES:
        if name not in values:
            state[name] = make()
    state.update(values)
    return new


def _opt(reader: Any, key: str, **bounds: Any) -> Callable[[dict[str, Any], ParsedTools], Any]:
    return lambda body, _tools: reader(body, key, **bounds)


# The optional fields in the order they are checked, each with its reader (called only when
# the body has the field, not null: absent or null, each of these is its field's default).
_OPTIONAL: tuple[tuple[str, Callable[[dict[str, Any], ParsedTools], Any]], ...] = (
    ("instructions", lambda body, _tools: _instructions(body["instructions"])),
    # A falsy `prompt` (`{}`, `""`) is no prompt, as before: only a truthy one is checked.
    ("prompt", lambda body, _tools: expect_object(body["prompt"], "prompt")
     if body["prompt"] else None),
    ("tool_choice", lambda body, tools: parse_tool_choice(body["tool_choice"], tools.tools,
                                                          tools.dropped)),
    ("text", lambda body, _tools: _text(body["text"])),
    ("reasoning", lambda body, _tools: _reasoning(body["reasoning"])),
    ("max_output_tokens", _opt(opt_int, "max_output_tokens", low=1)),
    ("temperature", _opt(opt_number, "temperature", low=0, high=2)),
    ("top_p", _opt(opt_number, "top_p", low=0, high=1)),
    ("metadata", lambda body, _tools: check_metadata(body["metadata"])),
    ("user", _opt(opt_str, "user", max_len=512)),
    ("stream", _opt(opt_bool, "stream")),
    ("include", lambda body, _tools: _include(body["include"])),
    ("service_tier", _opt(opt_str, "service_tier")),
    ("prompt_cache_key", _opt(opt_str, "prompt_cache_key", max_len=1024)),
    ("prompt_cache_retention",
     lambda body, _tools: _cache_retention(body["prompt_cache_retention"])),
    ("safety_identifier", _opt(opt_str, "safety_identifier", max_len=512)),
    ("max_tool_calls", _opt(opt_int, "max_tool_calls", low=1)),
    ("presence_penalty", _opt(opt_number, "presence_penalty", low=-2, high=2)),
    ("frequency_penalty", _opt(opt_number, "frequency_penalty", low=-2, high=2)),
    ("prompt_cache_options", lambda body, _tools: _cache_options(body["prompt_cache_options"])),
    ("top_logprobs", _opt(opt_int, "top_logprobs", low=0, high=20)),
    # A falsy `truncation` (`""`) is "disabled", as before.
    ("truncation", lambda body, _tools: one_of(body["truncation"] or "disabled",
                                               ("auto", "disabled"), "truncation")),
)

_OPTIONAL_READERS = dict(_OPTIONAL)
_OPTIONAL_KEYS = frozenset(_OPTIONAL_READERS)
_OPTIONAL_ORDER = {key: order for order, (key, _read) in enumerate(_OPTIONAL)}


def _deferred_items_need_search(items: list[Item], tools: list[dict[str, Any]]) -> None:
    """Deferred tools an `additional_tools` item brings need a `tool_search` tool to load
    them, as the request's own do (core/request/tools.py)."""
    if search_tool(tools) is not None:
        return
    for i, item in enumerate(items):
        if item.get("type") == ADDITIONAL_TOOLS:
            names = [t["name"] for t in item["tools"] if is_deferred(t)]
            if names:
                where = at(at("input", i), "tools")
                raise bad(where, f"Tools {', '.join(repr(n) for n in names)} have "
                                 "`defer_loading: true`, which needs a 'tool_search' tool "
                                 "among the tools to load them.")


def _context_management(value: Any) -> tuple[bool, int | None]:
    """(compact automatically?, the threshold in tokens). One `compaction` entry at most."""
    if value is None:
        return False, None
    entries = expect_list(value, "context_management")
    if len(entries) > 1:
        raise bad("context_management", "Invalid 'context_management': at most one entry is "
                                        "allowed.")
    if not entries:
        return False, None
    path = at("context_management", 0)
    entry = expect_object(entries[0], path)
    one_of(entry.get("type"), ("compaction",), at(path, "type"))
    for key in entry:
        if key not in ("type", "compact_threshold"):
            raise bad(at(path, key), f"Unknown parameter: '{at(path, key)}'.")
    return True, opt_int(entry, "compact_threshold", path, low=1)


def _refuse_unknown(body: dict[str, Any], tolerance: Tolerance) -> tuple[str, ...]:
    """Refuse what we cannot honour; the unknown fields a lenient create ignores."""
    ignored: list[str] = []
    for key, value in body.items():
        if key in _SERVED or value is None:
            continue
        if key in _WHY_NOT:
            raise bad(key, f"'{key}' is not supported by this server: {_WHY_NOT[key]}.")
        if not tolerance.strict_params:
            ignored.append(key)
            continue
        raise bad(key, f"Unknown parameter: '{key}'.")
    if body.get("client_metadata") is not None:
        expect_object(body["client_metadata"], "client_metadata")
    options = body.get("stream_options")
    if options is not None:
        for key in expect_object(options, "stream_options"):
            if key != "include_obfuscation":
                raise bad(at("stream_options", key), f"Unknown parameter: 'stream_options.{key}'.")
        if not body.get("stream"):
            raise bad("stream_options", "`stream_options` is only allowed when `stream` is true.")
    return tuple(ignored)


def _conversation(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value:
            raise bad("conversation", "Invalid 'conversation': empty string.")
        return value
    return req_str(expect_object(value, "conversation"), "id", "conversation")


def _instructions(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise bad("instructions", "Invalid type for 'instructions': expected a string.")


def _text(value: Any) -> dict[str, Any]:
    if value is None:
        return {"format": {"type": "text"}}
    text = expect_object(value, "text")
    for key in text:
        if key not in ("format", "verbosity"):
            raise bad(at("text", key), f"Unknown parameter: 'text.{key}'.")
    out: dict[str, Any] = {"format": _format(text.get("format"))}
    verbosity = text.get("verbosity")
    if verbosity is not None:
        out["verbosity"] = one_of(verbosity, ("low", "medium", "high"), "text.verbosity")
    return out


def _format(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "text"}
    fmt = expect_object(value, "text.format")
    kind = one_of(fmt.get("type"), ("text", "json_object", "json_schema"), "text.format.type")
    if kind != "json_schema":
        return {"type": kind}
    name = req_str(fmt, "name", "text.format")
    if not _FORMAT_NAME.match(name):
        raise bad("text.format.name", f"Invalid 'text.format.name': {name!r} does not match "
                                      "'^[a-zA-Z0-9_-]{1,64}$'.")
    schema = expect_object(fmt.get("schema"), "text.format.schema")
    out: dict[str, Any] = {"type": "json_schema", "name": name, "schema": schema,
                           "strict": opt_bool(fmt, "strict", "text.format")}
    # Always echoed, null when absent (the Open Responses schema requires the key).
    out["description"] = opt_str(fmt, "description", "text.format")
    return out


def _reasoning(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    reasoning = expect_object(value, "reasoning")
    for key in reasoning:
        if key not in ("effort", "summary", "generate_summary", "context"):
            raise bad(at("reasoning", key), f"Unknown parameter: 'reasoning.{key}'.")
    effort = reasoning.get("effort")
    if effort is not None:
        one_of(effort, EFFORTS, "reasoning.effort")
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary is not None:
        one_of(summary, ("auto", "concise", "detailed"), "reasoning.summary")
    out: dict[str, Any] = {"effort": effort, "summary": summary}
    context = reasoning.get("context")
    if context is not None:
        # Echoed as the mode used: `auto` is every earlier reasoning item the history holds
        # (what the proxy always sent), i.e. `all_turns` (core/translate/chat.py).
        mode = one_of(context, ("auto", "current_turn", "all_turns"), "reasoning.context")
        out["context"] = "all_turns" if mode == "auto" else mode
    return out


def _include(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    values = expect_list(value, "include")
    for i, entry in enumerate(values):
        if entry not in INCLUDABLE:
            path = at("include", i)
            raise bad(path, f"Cannot include {entry!r}: this server can include only "
                            f"{', '.join(repr(v) for v in INCLUDABLE)}.")
    return tuple(values)


def _cache_retention(value: Any) -> str | None:
    if value is None:
        return None
    return one_of(value, ("in_memory", "24h"), "prompt_cache_retention")


def _cache_options(value: Any) -> dict[str, Any] | None:
    """Accepted and echoed, otherwise ignored (vLLM's prefix cache has no such knobs); the
    echo carries both keys the SDK's `PromptCacheOptions` requires."""
    if value is None:
        return None
    options = expect_object(value, "prompt_cache_options")
    out: dict[str, Any] = {
        "mode": one_of(options.get("mode") or "implicit", ("implicit", "explicit"),
                       "prompt_cache_options.mode"),
        "ttl": one_of(options.get("ttl") or "30m", ("30m", "12h"), "prompt_cache_options.ttl"),
    }
    comparison = opt_str(options, "comparison_response_id", "prompt_cache_options")
    if comparison is not None:
        out["comparison_response_id"] = comparison
    return out
