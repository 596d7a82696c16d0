"""Hypothesis strategies for the fuzzer: request bodies shaped like the Responses schema (the
`openai` SDK's create params: every input item type, every tool type, tool_choice, text.format,
reasoning, metadata, include, ...), then mutated; query strings, headers and WebSocket frames.

A generated case is plain data (`Case`): method, path, query, headers and the raw body bytes,
so the same cases run against the in-process app (`make test`) and a real server (`make fuzz`).
`Known` carries ids that exist (made by the fuzzer's key before the run), so the strategies hit
real objects as well as unknown and malformed ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson
from hypothesis import strategies as st

MODEL = "sim-model"


@dataclass(frozen=True)
class Known:
    """Ids of objects the fuzzer's key made before the run."""

    responses: tuple[str, ...]
    conversations: tuple[str, ...]
    items: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


# -- leaves ---------------------------------------------------------------------------------
# Text with what breaks parsers and logs: NUL and control characters, CR LF, lone surrogates are
# not encodable in JSON by orjson, so astral and combining characters stand in for them.
NASTY = st.one_of(st.just(5000).map(lambda n: "a" * n), st.sampled_from([
                         "", "\x00", "\r\n", "\n\nevent: x\n", "\u202e", "💥" * 3,
                         "'; DROP TABLE x; --", "{{7*7}}", "../../etc/passwd", "%0d%0a", " ",
                         "\ufeff", "null", "resp_" + "0" * 48, "\x1b[31m"]))
TEXT = st.one_of(st.text(max_size=40), NASTY)
NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly `usual`, sometimes `odd` (one_of would pick each half the time). Nominally one
    in ten; hypothesis favours the first of a sampled_from's values, so nearer one in four."""
    return st.sampled_from(range(10)).flatmap(lambda i: odd if i == 0 else usual)


def _optional(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({k: v for k, v in required.items()},
                                 optional={k: v for k, v in optional.items()})


# -- the Responses create schema --------------------------------------------------------------
def _content_parts(kind: str) -> st.SearchStrategy[Any]:
    if kind == "output":
        return st.lists(_optional({"type": st.just("output_text"), "text": TEXT},
                                  {"annotations": st.just([])}), min_size=1, max_size=2)
    part = st.one_of(
        st.fixed_dictionaries({"type": st.just("input_text"), "text": TEXT}),
        _optional({"type": st.just("input_image")},
                  {"image_url": st.sampled_from(["https://example.com/a.png",
                                                 "data:image/png;base64,iVBORw0KGgo="]),
                   "detail": st.sampled_from(["auto", "low", "high"]), "file_id": TEXT}),
        _optional({"type": st.just("input_file")},
                  {"file_data": TEXT, "filename": TEXT, "file_url": TEXT, "file_id": TEXT}),
        _optional({"type": st.just("input_audio")}, {"input_audio": JSON}),
    )
    return st.lists(part, min_size=1, max_size=3)


def items(known: Known) -> st.SearchStrategy[Any]:
    ids = st.one_of(TEXT, st.sampled_from(known.items or ("msg_x",)))
    call_id = st.one_of(st.just("call_1"), TEXT)
    message = st.one_of(
        _optional({"role": st.sampled_from(["user", "system", "developer"]),
                   "content": st.one_of(TEXT, _content_parts("input"))},
                  {"type": st.just("message"), "id": ids}),
        _optional({"role": st.just("assistant"), "content": st.one_of(
            TEXT, _content_parts("output"))}, {"type": st.just("message"), "id": ids,
                                              "status": st.just("completed")}),
    )
    return st.one_of(
        message,
        _optional({"type": st.just("function_call"), "call_id": call_id, "name": TEXT,
                   "arguments": st.one_of(st.just('{"city": "Paris"}'), TEXT)},
                  {"id": ids, "namespace": TEXT, "status": st.just("completed")}),
        _optional({"type": st.just("function_call_output"), "call_id": call_id,
                   "output": st.one_of(TEXT, _content_parts("input"))}, {"id": ids}),
        _optional({"type": st.just("reasoning"), "summary": st.just([])},
                  {"id": ids, "encrypted_content": TEXT,
                   "content": st.just([{"type": "reasoning_text", "text": "hm"}])}),
        _optional({"type": st.just("custom_tool_call"), "call_id": call_id, "name": TEXT,
                   "input": TEXT}, {"id": ids}),
        _optional({"type": st.just("custom_tool_call_output"), "call_id": call_id,
                   "output": TEXT}, {"id": ids}),
        st.fixed_dictionaries({"type": st.just("item_reference"), "id": ids}),
        _optional({"type": st.sampled_from(["mcp_list_tools", "mcp_call", "mcp_approval_request",
                                            "mcp_approval_response", "compaction",
                                            "web_search_call", "file_search_call",
                                            "computer_call", "local_shell_call",
                                            "image_generation_call"])},
                  {"id": ids, "server_label": TEXT, "approval_request_id": ids,
                   "approve": st.booleans(), "encrypted_content": TEXT, "name": TEXT,
                   "arguments": TEXT, "tools": st.just([])}),
    )


SCHEMA = st.sampled_from([
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {"type": "object", "properties": {}, "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"a": {"$ref": "#"}}}},
])
FUNCTION = _optional({"type": st.just("function"), "name": st.one_of(
    st.sampled_from(["get_weather", "lookup"]), TEXT)},
    {"parameters": st.one_of(SCHEMA, JSON), "strict": st.booleans(), "description": TEXT})
CUSTOM = _optional({"type": st.just("custom"), "name": st.one_of(st.just("shell"), TEXT)},
                   {"description": TEXT, "format": st.one_of(
                       st.just({"type": "text"}),
                       st.just({"type": "grammar", "syntax": "regex", "definition": "a+"}),
                       JSON)})
TOOL = st.one_of(
    FUNCTION, CUSTOM,
    _optional({"type": st.just("namespace"), "name": TEXT, "description": TEXT},
              {"tools": st.lists(st.one_of(FUNCTION, CUSTOM), max_size=3)}),
    _optional({"type": st.just("mcp"), "server_label": TEXT},
              {"server_url": st.sampled_from(["http://127.0.0.1:1/mcp", "file:///etc/passwd",
                                              "http://169.254.169.254/latest"]),
               "require_approval": st.sampled_from(["never", "always"]),
               "headers": st.dictionaries(TEXT, TEXT, max_size=2)}),
    _optional({"type": st.sampled_from(["web_search", "web_search_preview", "file_search",
                                        "code_interpreter", "image_generation", "computer_use",
                                        "computer_use_preview", "local_shell", "shell",
                                        "apply_patch", "tool_search", "no_such_tool"])},
              {"vector_store_ids": st.just(["vs_1"]), "container": JSON}),
)
TOOL_CHOICE = st.one_of(
    st.sampled_from(["auto", "none", "required"]),
    st.fixed_dictionaries({"type": st.sampled_from(["function", "custom"]),
                           "name": st.sampled_from(["get_weather", "shell", "nope"])}),
    st.fixed_dictionaries({"type": st.just("allowed_tools"),
                           "mode": st.sampled_from(["auto", "required"]),
                           "tools": st.just([{"type": "function", "name": "get_weather"}])}),
    st.fixed_dictionaries({"type": st.sampled_from(["web_search", "mcp", "file_search"])}),
)
TEXT_FORMAT = st.one_of(
    st.just({"type": "text"}), st.just({"type": "json_object"}),
    _optional({"type": st.just("json_schema"), "name": st.one_of(st.just("out"), TEXT),
               "schema": st.one_of(SCHEMA, JSON)}, {"strict": st.booleans(),
                                                   "description": TEXT}),
)
METADATA = st.dictionaries(st.text(max_size=70), st.one_of(st.text(max_size=20), NASTY, JSON),
                           max_size=18)
INCLUDE = st.lists(st.sampled_from(["reasoning.encrypted_content",
                                    "message.input_image.image_url",
                                    "file_search_call.results", "nope"]), max_size=3)


def create_bodies(known: Known) -> st.SearchStrategy[dict[str, Any]]:
    conversations = st.one_of(st.sampled_from(known.conversations or ("conv_x",)), TEXT)
    return _optional({"model": mostly(st.just(MODEL), TEXT),
                      "input": st.one_of(TEXT, st.lists(items(known), max_size=4))}, {
        "instructions": TEXT,
        "tools": st.lists(TOOL, max_size=3),
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": st.booleans(),
        "text": st.fixed_dictionaries({}, optional={
            "format": TEXT_FORMAT, "verbosity": st.sampled_from(["low", "medium", "high"])}),
        "reasoning": st.fixed_dictionaries({}, optional={
            "effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"]),
            "summary": st.sampled_from(["auto", "concise", "detailed"])}),
        "max_output_tokens": st.integers(min_value=-5, max_value=64),
        "temperature": st.floats(min_value=-1, max_value=3),
        "top_p": st.floats(min_value=-1, max_value=2),
        "metadata": METADATA,
        "user": TEXT,
        "store": st.booleans(),
        "stream": st.booleans(),
        "background": st.booleans(),
        "previous_response_id": st.one_of(st.sampled_from(known.responses or ("resp_x",)),
                                          TEXT),
        "conversation": st.one_of(conversations, st.fixed_dictionaries({"id": conversations})),
        "include": INCLUDE,
        "truncation": st.sampled_from(["auto", "disabled", "middle"]),
        "prompt_cache_key": TEXT,
        "service_tier": st.sampled_from(["auto", "default", "flex", "priority"]),
        "safety_identifier": TEXT,
        "max_tool_calls": st.integers(min_value=-1, max_value=5),
        "top_logprobs": mostly(st.just(0), st.integers(min_value=-1, max_value=3)),
        "stream_options": st.fixed_dictionaries({"include_obfuscation": st.booleans()}),
        "store_options": JSON,
    })


def chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    message = _optional({"role": st.sampled_from(["user", "system", "assistant", "tool",
                                                  "developer"]),
                         "content": mostly(TEXT, st.lists(JSON, max_size=2))},
                        {"name": TEXT, "tool_call_id": TEXT})
    return _optional({"model": st.one_of(st.just(MODEL), TEXT),
                      "messages": st.lists(message, max_size=3)},
                     {"stream": st.booleans(), "max_tokens": st.integers(-3, 64),
                      "temperature": st.floats(-1, 3),
                      "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
                      "tools": st.lists(st.fixed_dictionaries(
                          {"type": st.just("function"), "function": JSON}), max_size=2),
                      "n": st.integers(-1, 3), "logprobs": st.booleans()})


def conversation_bodies(known: Known) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "items": st.lists(items(known), max_size=4), "metadata": METADATA})


def dumps(value: Any) -> bytes:
    """JSON bytes; integers past 64 bits (which orjson refuses) through the json module."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=False).encode()


# -- mutations --------------------------------------------------------------------------------
def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(copy[head], rest, new)
    return copy


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _delete(value: Any, path: tuple[Any, ...]) -> Any:
    if len(path) == 1:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k != path[0]}
        return [v for i, v in enumerate(value) if i != path[0]]
    head = path[0]
    if isinstance(value, dict):
        return {**value, head: _delete(value[head], path[1:])}
    copy = list(value)
    copy[head] = _delete(copy[head], path[1:])
    return copy


def deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


_WEIRD = st.one_of(JSON, st.sampled_from([
    2**64, -(2**64), 10**400, -1, 1.5e308, "", [], {}, "\x00" * 4,
]), st.just(70000).map(lambda n: "x" * n), st.integers(min_value=2, max_value=1100).map(deep))


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[Any]) -> bytes:
    """A body from `base`, then none, one or a few mutations, rendered as JSON bytes (or as
    broken bytes: truncated, NaN, trailing garbage, invalid UTF-8, not an object)."""
    value: Any = draw(base)
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        paths = _paths(value)
        # The root itself rarely: a body that is not an object is one case, not a third.
        path = draw(mostly(st.sampled_from(paths[1:] or paths), st.just(())))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "deepen"]))
        if action == "replace":
            value = _replace(value, path, draw(_WEIRD))
        elif action == "delete" and path:
            value = _delete(value, path)
        elif action == "add":
            key = draw(st.one_of(st.sampled_from([
                "input", "model", "tools", "__proto__", "constructor", "stream", "type",
                "prompt", "context_management"]), TEXT))
            target = _get(value, path)
            if isinstance(target, dict):
                value = _replace(value, path, {**target, key: draw(_WEIRD)})
        elif action == "deepen":
            value = _replace(value, path, deep(draw(st.sampled_from([63, 64, 65, 200, 990,
                                                                     1030]))))
    raw = dumps(value)
    form = draw(mostly(st.just("json"), st.sampled_from([
        "truncate", "nan", "garbage", "latin1", "array", "empty", "bom"])))
    if form == "truncate":
        return raw[: draw(st.integers(min_value=1, max_value=max(1, len(raw) - 1)))]
    if form == "nan":
        return raw.replace(b"1", b"NaN", 1)
    if form == "garbage":
        return raw + draw(st.binary(min_size=1, max_size=8))
    if form == "latin1":
        return raw + b"\xff\xfe"
    if form == "array":
        return b"[" + raw + b"]"
    if form == "empty":
        return b""
    if form == "bom":
        return b"\xef\xbb\xbf" + raw
    return raw


# -- ids, query strings, headers --------------------------------------------------------------
def ids(pool: tuple[str, ...]) -> st.SearchStrategy[str]:
    """An id for a path segment: a real one, a near miss, or junk (percent-encoded)."""
    raw = st.one_of(st.sampled_from(pool) if pool else st.just("resp_x"),
                    st.sampled_from(pool).map(lambda s: s[:-1]) if pool else st.just(""),
                    TEXT.filter(lambda s: s != ""),
                    st.sampled_from(["resp_" + "a" * 50, "..", ".", "%", "resp_\r\nx: y"]))
    return raw.map(lambda s: quote(s, safe=""))


QUERY_VALUE = st.one_of(st.sampled_from(["true", "false", "1", "0", "", "-1", "-2", "99999",
                                         "asc", "desc", "sideways", "2.5", "1e9", "TRUE",
                                         "reasoning.encrypted_content", "nope",
                                         "9" * 40]), TEXT)
QUERY_NAME = st.one_of(st.sampled_from(["stream", "starting_after", "include", "include[]",
                                        "after", "before", "limit", "order", "x"]), TEXT)
QUERY = st.lists(st.tuples(QUERY_NAME, QUERY_VALUE), max_size=5)

HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                             blacklist_characters="\x7f"), max_size=60
                      ).map(str.strip)


def headers(key: str) -> st.SearchStrategy[dict[str, str]]:
    """Mostly the fuzzer's key; sometimes none, another scheme, junk; every other header the
    proxy reads, with junk too (httpx refuses CR and LF in headers: tests/.../isolation sends
    those over a raw socket)."""
    auth = mostly(st.just(f"Bearer {key}"), st.one_of(st.sampled_from([
        "", "Bearer", "Bearer ", f"bearer {key}", f"Basic {key}", f"Bearer {key}x",
        f"Bearer  {key}", "Bearer sk-other"]), HEADER_TEXT).map(str.strip))  # h11: no trailing SP
    return st.fixed_dictionaries({"authorization": auth}, optional={
        "content-type": st.one_of(st.sampled_from([
            "application/json", "text/plain", "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x", "application/json; charset=latin-1"]),
            HEADER_TEXT),
        "x-request-id": st.one_of(st.sampled_from(["req_1", "a" * 129, "a b", "../x"]),
                                  HEADER_TEXT),
        "cache-control": st.one_of(st.sampled_from(["no-cache", "no-store", "no-cache, no-store",
                                                    "max-age=0", "private"]), HEADER_TEXT),
        "accept": st.sampled_from(["text/event-stream", "application/json", "*/*", "x/y"]),
        "x-stainless-retry-count": HEADER_TEXT,
        "openai-beta": st.sampled_from(["responses_websockets=2026-02-06", "x"]),
    })


# -- WebSocket frames -------------------------------------------------------------------------
def ws_frames(known: Known, limit: int) -> st.SearchStrategy[str | bytes]:
    """Frames of every kind; `limit` is the proxy's `--max-body-bytes` (frames just over it
    are made too; uvicorn closes the socket only past twice that)."""
    def framed(body: bytes, kind: str) -> bytes:
        if body[:1] != b"{" or body[-1:] != b"}":
            return body
        inner = body[1:-1]
        head = orjson.dumps(kind)
        return b'{"type":' + head + (b"," + inner if inner.strip() else b"") + b"}"

    create = mutated(create_bodies(known)).map(lambda b: framed(b, "response.create"))
    other = st.tuples(mutated(create_bodies(known)), st.sampled_from([
        "response.processed", "response.append", "response.cancel", "session.update", "",
        "RESPONSE.CREATE"])).map(lambda t: framed(t[0], t[1]))
    odd = st.one_of(
        st.binary(max_size=64), st.text(max_size=64).map(str.encode),
        st.sampled_from([b"null", b"[]", b'{"type": 1}', b'{"type": null}', b"{}",
                         b'{"type": "response.create"}', b'"response.create"']),
        JSON.map(lambda v: dumps({"type": v})),
        st.integers(min_value=1, max_value=64).map(
            lambda n: b'{"type": "response.create", "input": "' + b"x" * (limit + n) + b'"}'),
    )
    frame = st.one_of(create, create, other, odd)
    # Text frames mostly (what clients send); some binary, which the proxy reads the same way.
    return st.tuples(frame, st.booleans()).map(
        lambda t: t[0].decode("utf-8", "replace") if t[1] else t[0])
