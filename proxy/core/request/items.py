"""Input items: what a client may send as `input` (or add to a conversation), checked and put in
the one stored form every later step reads (translation, `input_items`, conversation items).

Stored forms (docs/protocol.md §2.2), every item with an `id` (the client's, when it sent one):
    message      {id, type:"message", role, status:"completed", content:[parts]}
                 user/system/developer parts: input_text | input_image | input_file;
                 assistant parts: output_text (annotations []) | refusal
    function_call         {id, type, call_id, name, arguments, status:"completed"}
    function_call_output  {id, type, call_id, output, status:"completed"}
                          (a function_call keeps its `namespace`, an assistant message its
                          `phase`, when the client sent them)
    custom_tool_call      {id, type, call_id, name, input, status:"completed", namespace?}
    custom_tool_call_output {id, type, call_id, output, status:"completed"}
    reasoning             {id, type, summary, content?, encrypted_content?}
    compaction            {id, type, encrypted_content}  (core/compaction.py: a sealed summary)
    compaction_trigger    {id, type}  (compact now; the last input item)
    tool_search_call      {id, type, status, execution, call_id, arguments}
    tool_search_output    {id, type, status, execution, call_id, tools}
    additional_tools      {id, type, role:"developer", tools}  (core/tools/toolsearch.py)
A request's `item_reference` is resolved to the stored item it names (core/request/references.py).
Anything else (built-in tool calls, unknown types) is refused with a 400 that
names it: we do not drop what we cannot honour.

`encrypted_content` here is a sealed copy of the reasoning text (for clients that keep no state
and replay reasoning items, `include=["reasoning.encrypted_content"]`), see `core/seal.py`. It
is not secret: the same text is in the item's `content`. A blob that is not one of ours (forged,
altered, OpenAI's) is refused with a 400 naming it, as OpenAI refuses invalid encrypted content.
Parsing only checks the seal (nothing is inflated) and the item is stored as the client sent
it, blob and all: `open_reasoning` puts the text in `content` only in the copy the upstream
request is built from (core/request/expansion.py, which counts it), so a small blob never becomes a
large stored item.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from proxy.core import compaction
from proxy.core import ids as idp
from proxy.core.documents import INVALID as INVALID_FILE
from proxy.core.documents import Unreadable, extract_text, runs_long
from proxy.core.errors import InvalidRequest
from proxy.core.hosted import ITEM_TYPES as HOSTED_ITEM_TYPES
from proxy.core.hosted import parse_hosted_item
from proxy.core.ids import IdFactory
from proxy.core.mcp import ITEM_TYPES as MCP_ITEM_TYPES
from proxy.core.mcp import parse_mcp_item
from proxy.core.request.fields import (
    at,
    bad,
    expect_list,
    expect_object,
    expect_str,
    one_of,
    opt_str,
    req_str,
)
from proxy.core.request.references import is_reference, parse_reference
from proxy.core.request.tools import MAX_ITEM_TOOLS, parse_member_tools
from proxy.core.seal import Sealer, SealError, seal_errors
from proxy.core.tools import toolsearch
from proxy.core.types import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    REASONING,
    Item,
)

ROLES = ("user", "assistant", "system", "developer")
# Input item types of the late-2026 API refused by name: nothing here could honour them.
_REFUSED = {
    "configuration_update": "a configuration update item sets the reasoning or text settings "
                            "of later responses, which this server does not keep; send "
                            "`reasoning` and `text` on each request instead",
    "program": "programmatic tool calling is not run by this server",
    "program_output": "programmatic tool calling is not run by this server",
}
IMAGE_DETAILS = ("low", "high", "auto", "original")
# Where an input_file's bytes come from (exactly one per part).
FILE_SOURCES = ("file_id", "file_url", "file_data")
MAX_FILE_REF = 4096
# The purpose reasoning blobs are sealed for (core/seal.py): no other blob opens as one.
REASONING_PURPOSE = "reasoning"


def seal_reasoning(sealer: Sealer) -> Callable[[str], str]:
    """The assembler's sealing callable for reasoning text."""
    return functools.partial(sealer.seal, REASONING_PURPOSE)


# -- input ------------------------------------------------------------------------------------
def parse_input(value: Any, ids: IdFactory, *, path: str = "input",
                max_items: int, sealer: Sealer | None = None,
                references: bool = False) -> list[Item]:
    """`input` (a string or a list of items) → stored items. With `references`, an
    `item_reference` becomes a placeholder that the service resolves
    (core/request/references.py)."""
    if isinstance(value, str):
        return [_message("user", [{"type": "input_text", "text": value}], ids(idp.MESSAGE))]
    items = expect_list(value, path)
    if len(items) > max_items:
        raise bad(path, f"Invalid '{path}': too many items ({len(items)}); at most "
                        f"{max_items} are allowed.")
    return [parse_reference(item, at(path, i)) if references and is_reference(item)
            else parse_item(item, ids, at(path, i), sealer) for i, item in enumerate(items)]


def parse_item(value: Any, ids: IdFactory, path: str, sealer: Sealer | None = None) -> Item:
    """One input item in its stored form. `sealer` opens `encrypted_content` (None: refused)."""
    item = expect_object(value, path)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = MESSAGE  # the "easy" form: {role, content}
    if kind == MESSAGE:
        return _parse_message(item, ids, path)
    if kind == FUNCTION_CALL:
        return _parse_call(item, FUNCTION_CALL, idp.FUNCTION_CALL, "arguments", ids, path)
    if kind in (CUSTOM_TOOL_CALL, CUSTOM_TOOL_CALL_OUTPUT):
        return _parse_custom(item, kind, ids, path)
    if kind == FUNCTION_CALL_OUTPUT:
        return {
            "id": _given_id(item, path) or ids(idp.FUNCTION_CALL_OUTPUT),
            "type": FUNCTION_CALL_OUTPUT,
            "call_id": req_str(item, "call_id", path),
            "output": _tool_output(item.get("output"), at(path, "output")),
            "status": "completed",
        }
    if kind == REASONING:
        return _parse_reasoning(item, ids, path, sealer)
    if kind == compaction.COMPACTION:
        return compaction.parse_compaction(item, ids, path, sealer)
    if kind == compaction.TRIGGER:
        return compaction.parse_trigger(item, ids, path)
    if isinstance(kind, str) and kind in MCP_ITEM_TYPES:  # a list `type` is unhashable
        return parse_mcp_item(item, ids, path)
    if isinstance(kind, str) and kind in HOSTED_ITEM_TYPES:
        return parse_hosted_item(item, ids, path)
    return _parse_other(item, kind, ids, path)


def _parse_other(item: dict[str, Any], kind: Any, ids: IdFactory, path: str) -> Item:
    """The late-2026 items (tool search, added tools), or the 400 that names the type."""
    if kind in (toolsearch.CALL, toolsearch.OUTPUT, toolsearch.ADDITIONAL_TOOLS):
        return _parse_tool_item(item, kind, ids, path)
    where = at(path, "type")
    if isinstance(kind, str) and kind in _REFUSED:
        raise bad(where, f"Input items of type {kind!r} are not supported by this server: "
                         f"{_REFUSED[kind]}.")
    if kind is None:
        raise bad(where, f"Missing required parameter: '{where}'.")
    raise bad(where, f"Input items of type {kind!r} are not supported by this server; supported "
                     "types are 'message', 'function_call', 'function_call_output', "
                     "'custom_tool_call', 'custom_tool_call_output', 'reasoning', "
                     "'compaction', 'compaction_trigger', the 'mcp_*' items and the hosted "
                     f"tools' {', '.join(repr(t) for t in sorted(HOSTED_ITEM_TYPES))} "
                     "('item_reference' too in a create's input).")


def _parse_tool_item(item: dict[str, Any], kind: str, ids: IdFactory, path: str) -> Item:
    """A tool search's call or output, or an `additional_tools` item (core/tools/toolsearch.py):
    kept as sent (checked), their tools parsed as a request's are."""
    if kind == toolsearch.ADDITIONAL_TOOLS:
        one_of(item.get("role"), ("developer",), at(path, "role"))
        return {"id": _given_id(item, path) or ids(idp.ADDITIONAL_TOOLS),
                "type": kind, "role": "developer",
                "tools": parse_member_tools(item.get("tools"), at(path, "tools"), MAX_ITEM_TOOLS)}
    execution = one_of(item.get("execution") or "client", toolsearch.EXECUTIONS,
                       at(path, "execution"))
    status = one_of(item.get("status") or "completed", ("in_progress", "completed",
                                                        "incomplete"), at(path, "status"))
    call_id = opt_str(item, "call_id", path, max_len=256)
    if kind == toolsearch.CALL:
        arguments = item.get("arguments")
        if arguments is None:
            where = at(path, "arguments")
            raise bad(where, f"Missing required parameter: '{where}'.")
        prefix, fields = toolsearch.CALL_PREFIX, {"arguments": arguments}
    else:
        prefix, fields = toolsearch.OUTPUT_PREFIX, {"tools": parse_member_tools(
            item.get("tools"), at(path, "tools"), MAX_ITEM_TOOLS)}
    return {"id": _given_id(item, path) or ids(prefix), "type": kind, "status": status,
            "execution": execution, "call_id": call_id, **fields}


def _given_id(item: dict[str, Any], path: str) -> str | None:
    return opt_str(item, "id", path, max_len=256) or None


def _message(role: str, content: list[dict[str, Any]], item_id: str) -> Item:
    return {"id": item_id, "type": MESSAGE, "role": role, "status": "completed",
            "content": content}


def _parse_message(item: dict[str, Any], ids: IdFactory, path: str) -> Item:
    role = one_of(item.get("role"), ROLES, at(path, "role"))
    content_path = at(path, "content")
    content = item.get("content")
    if content is None:
        raise bad(content_path, f"Missing required parameter: '{content_path}'.")
    if isinstance(content, str):
        kind = "output_text" if role == "assistant" else "input_text"
        parts = [_text_part(kind, content)]
    else:
        raw = expect_list(content, content_path)
        parts = [_parse_part(p, role, at(content_path, i)) for i, p in enumerate(raw)]
    prefix = idp.MESSAGE
    message = _message(role, parts, _given_id(item, path) or ids(prefix))
    if role == "assistant" and item.get("phase") is not None:
        # Clients are told to resend an assistant message's phase; keep it for them.
        message["phase"] = one_of(item["phase"], ("commentary", "final_answer"),
                                  at(path, "phase"))
    return message


def _text_part(kind: str, text: str) -> dict[str, Any]:
    if kind == "output_text":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": kind, "text": text}


def _parse_part(value: Any, role: str, path: str) -> dict[str, Any]:
    part = expect_object(value, path)
    kind = part.get("type")
    if role == "assistant":
        if kind in ("output_text", "input_text", "text"):
            return _text_part("output_text", req_str(part, "text", path, nonempty=False))
        if kind == "refusal":
            return {"type": "refusal", "refusal": req_str(part, "refusal", path,
                                                          nonempty=False)}
        allowed = "'output_text' and 'refusal'"
    else:
        if kind in ("input_text", "text"):
            return _text_part("input_text", req_str(part, "text", path, nonempty=False))
        if kind == "input_image":
            return _image_part(part, path)
        if kind == "input_file":
            return parse_file_part(part, path)
        allowed = "'input_text', 'input_image' and 'input_file'"
    where = at(path, "type")
    raise bad(where, f"Invalid value for '{where}': {kind!r}. Content of a {role} message may "
                     f"be {allowed}.")


def _image_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    detail = part.get("detail") or "auto"
    one_of(detail, IMAGE_DETAILS, at(path, "detail"))
    if part.get("file_id") is not None:
        where = at(path, "file_id")
        raise bad(where, f"'{where}' is not supported: images are not read from uploaded "
                         "files here; send the image as `image_url` (a URL or a data: URL).")
    url = req_str(part, "image_url", path)
    return {"type": "input_image", "detail": detail, "image_url": url}


def _content_parts(items: Iterable[Item], path: str | None
                   ) -> Iterator[tuple[dict[str, Any], str | None]]:
    """(part, where) of every content part of messages and tool outputs; `where` is the
    part's path under `path` (`input[i].content[j]`), None when `path` is None (history: the
    client did not send it in this request)."""
    for i, item in enumerate(items):
        key = "content" if item.get("type") == MESSAGE else "output"
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if isinstance(part, dict):
                yield part, None if path is None else f"{path}[{i}].{key}[{j}]"


def image_urls(items: Iterable[Item], path: str | None = "input"
               ) -> Iterator[tuple[str, str | None]]:
    """(URL, where) of every input_image in messages and tool outputs, data: URLs left out;
    `where` names the part's `image_url` (`_content_parts`)."""
    for part, where in _content_parts(items, path):
        url = part.get("image_url") if part.get("type") == "input_image" else None
        if isinstance(url, str) and url[:5].lower() != "data:":
            yield url, None if where is None else f"{where}.image_url"


def fetches_media(items: Iterable[Item]) -> bool:
    """Whether `image_urls` or `file_parts` would yield anything for `items` (an image to fetch,
    an input_file to read): one walk without the parts' paths, so that a request with neither
    (nearly every one) skips the fetchers' walks and their path strings (a create's media step
    3.6 µs -> 0.4)."""
    for item in items:
        parts = item.get("content" if item.get("type") == MESSAGE else "output")
        if not isinstance(parts, list):
            continue
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "input_file":
                return True
            if kind == "input_image":
                url = part.get("image_url")
                if isinstance(url, str) and url[:5].lower() != "data:":
                    return True
    return False


def parse_file_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    """One of `file_id` (a file of the caller's key, services/files/), `file_url` (fetched under
    --fetch-allow) or `file_data` (inline: a base64 data: URL or bare base64); the text reaches
    the model (services/responses/inputs.py resolves the first two, translation reads the third)."""
    given = [key for key in FILE_SOURCES if part.get(key) is not None]
    if len(given) != 1:
        raise bad(path, f"Invalid '{path}': an input_file needs exactly one of 'file_id', "
                        "'file_url' and 'file_data'.")
    key = given[0]
    value = req_str(part, key, path)
    if key != "file_data" and len(value) > MAX_FILE_REF:
        raise bad(at(path, key), f"Invalid '{at(path, key)}': longer than {MAX_FILE_REF} "
                                 "characters.")
    filename = opt_str(part, "filename", path, max_len=512)
    if key == "file_data":
        # Refuse now what could not be read: base64 always; the text of any kind but PDF,
        # HTML and JSON, whose reading is costly and runs in a child process when the request
        # is served (services/files/extraction.py), where an unreadable one is refused naming
        # this part.
        raw = file_bytes(value, path)
        if not runs_long(raw, filename, _media_type(value)):
            document_text(raw, path, filename, _media_type(value))
    out: dict[str, Any] = {"type": "input_file", key: value}
    if filename is not None:
        out["filename"] = filename
    return out


def file_text(data: str, path: str, filename: str | None = None) -> str:
    """The text of an inline file: a base64 `data:` URL (its media type is a hint) or bare
    base64 of a PDF, text, Markdown, HTML or JSON file (core/documents.py)."""
    return document_text(file_bytes(data, path), path, filename, _media_type(data))


def inline_file(data: str, path: str) -> tuple[bytes, str | None]:
    """The bytes of inline `file_data` and the media type its data: URL names, if any."""
    return file_bytes(data, path), _media_type(data)


def _media_type(data: str) -> str | None:
    if data.startswith("data:") and "," in data[:256]:
        return data[5:data.index(",")].split(";")[0] or None
    return None


def file_bytes(data: str, path: str) -> bytes:
    """The bytes of inline `file_data`: a base64 data: URL or bare base64."""
    payload = data.split(",", 1)[1] if data.startswith("data:") and "," in data else data
    try:
        return base64.b64decode(payload, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidRequest(f"Invalid '{path}': 'file_data' is not base64 (a data: URL or "
                             "bare base64).", param=path, code=INVALID_FILE) from None


def document_text(raw: bytes, path: str, filename: str | None, media_type: str | None) -> str:
    """`extract_text`, its refusal a 400 naming the part with the SDK's code."""
    try:
        return extract_text(raw, filename, media_type)
    except Unreadable as exc:
        raise unreadable(exc, path) from None


def unreadable(exc: Unreadable, path: str) -> InvalidRequest:
    """The 400 for a document at `path` that gives no text, with the SDK's code."""
    return InvalidRequest(f"Invalid '{path}': {exc.message}.", param=path, code=exc.code)


def file_key(part: dict[str, Any]) -> str:
    """The key of an input_file's text in a request's `media` map (services/responses/inputs.py);
    NUL-led so that no image URL can equal it. Inline data is keyed by its digest."""
    if part.get("file_id") is not None:
        return "\0file:" + str(part["file_id"])
    if part.get("file_url") is not None:
        return "\0url:" + str(part["file_url"])
    return "\0data:" + hashlib.sha256(str(part.get("file_data", "")).encode()).hexdigest()


def file_parts(items: Iterable[Item], path: str | None = "input"
               ) -> Iterator[tuple[dict[str, Any], str | None]]:
    """(part, where) of every input_file in messages and tool outputs (`_content_parts`)."""
    for part, where in _content_parts(items, path):
        if part.get("type") == "input_file":
            yield part, where


def _tool_output(value: Any, path: str) -> str | list[dict[str, Any]]:
    if isinstance(value, str):
        return value
    if value is None:
        raise bad(path, f"Missing required parameter: '{path}'.")
    parts = expect_list(value, path)
    return [_parse_part(p, "user", at(path, i)) for i, p in enumerate(parts)]


def _parse_reasoning(item: dict[str, Any], ids: IdFactory, path: str,
                     sealer: Sealer | None) -> Item:
    out: Item = {"id": _given_id(item, path) or ids(idp.REASONING), "type": REASONING}
    summary_path = at(path, "summary")
    summary = expect_list(item.get("summary") or [], summary_path)
    out["summary"] = [
        {"type": "summary_text",
         "text": req_str(expect_object(s, at(summary_path, i)), "text", at(summary_path, i),
                         nonempty=False)}
        for i, s in enumerate(summary)
    ]
    if item.get("content") is not None:
        content_path = at(path, "content")
        out["content"] = [
            {"type": "reasoning_text",
             "text": req_str(expect_object(c, at(content_path, i)), "text",
                             at(content_path, i), nonempty=False)}
            for i, c in enumerate(expect_list(item["content"], content_path))
        ]
    sealed = item.get("encrypted_content")
    if sealed is not None:
        where = at(path, "encrypted_content")
        blob = expect_str(sealed, where)
        with seal_errors(where, "reasoning"):
            if sealer is None:
                raise SealError("no sealer")
            sealer.verify(REASONING_PURPOSE, blob)
        out["encrypted_content"] = blob
    return out


def open_reasoning(item: Item, sealer: Sealer, where: str) -> tuple[Item, int]:
    """A reasoning item to translate, and the bytes opened for it: one that carries only its
    sealed copy gets the text in `content` (a copy of the item); any other is itself, 0."""
    blob = item.get("encrypted_content")
    if item.get("type") != REASONING or not isinstance(blob, str) or item.get("content"):
        return item, 0
    with seal_errors(where, "reasoning"):
        text = sealer.open(REASONING_PURPOSE, blob)
    return {**item, "content": [{"type": "reasoning_text", "text": text}]}, len(text.encode())


def reasoning_text(item: Item) -> str:
    """What a reasoning item says: its raw text, else its summary (a sealed copy the client sent
    is opened into `content` by `open_reasoning` before translation)."""
    parts = item.get("content") or []
    text = "".join(str(p.get("text", "")) for p in parts)
    if text:
        return text
    return "\n".join(str(s.get("text", "")) for s in item.get("summary") or [])


def _namespaced(out: Item, item: dict[str, Any], path: str) -> Item:
    """A tool call item keeps the namespace of its tool (translation flattens it again)."""
    namespace = opt_str(item, "namespace", path, max_len=64)
    if namespace:
        out["namespace"] = namespace
    return out


def _parse_call(item: dict[str, Any], kind: str, prefix: str, text: str, ids: IdFactory,
                path: str) -> Item:
    """A function call (its `arguments`) or a custom tool call (its `input`) as stored."""
    return _namespaced({
        "id": _given_id(item, path) or ids(prefix),
        "type": kind,
        "call_id": req_str(item, "call_id", path),
        "name": req_str(item, "name", path),
        text: req_str(item, text, path, nonempty=False),
        "status": "completed",
    }, item, path)


def _parse_custom(item: dict[str, Any], kind: str, ids: IdFactory, path: str) -> Item:
    if kind == CUSTOM_TOOL_CALL:
        return _parse_call(item, CUSTOM_TOOL_CALL, idp.CUSTOM_TOOL_CALL, "input", ids, path)
    return {
        "id": _given_id(item, path) or ids(idp.CUSTOM_TOOL_CALL_OUTPUT),
        "type": CUSTOM_TOOL_CALL_OUTPUT,
        "call_id": req_str(item, "call_id", path),
        "output": _tool_output(item.get("output"), at(path, "output")),
        "status": "completed",
    }
