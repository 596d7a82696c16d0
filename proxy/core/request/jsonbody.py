"""Request bodies: bytes in, a JSON object out, or an OpenAI-shaped 400 saying what is wrong.

Nesting is bounded at `MAX_DEPTH` levels. orjson itself stops at 1024, but much of the proxy
walks request JSON recursively (canonical cache keys, schema handling, deep copies), and
Python's recursion limit (1000 frames, shared with the whole call stack) sits right there: a
body 900 levels deep would parse and then fail somewhere far from here as a 500. No real
request comes near 64 levels (OpenAI's structured outputs allow 10 levels of schema nesting,
which is about 25 levels of body), so deeper bodies are refused as they arrive, by one
iterative walk that names the top-level field holding the deep part (a body over 64 KiB is
first measured on its bytes, and walked only when that finds it too deep or cannot tell).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import InvalidRequest

MAX_DEPTH = 64


def parse_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise InvalidRequest("The request body is empty; a JSON object is expected.")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc.msg} at position {exc.pos})."
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object, not {type(data).__name__}."
        )
    # Nesting deeper than MAX_DEPTH takes more than MAX_DEPTH brackets opened (in strings
    # too: an overcount); a body with no more than that cannot, and is not walked (a call per
    # container, `isinstance` a call per value: ~50 calls for a short agent turn's body).
    if body.count(b"{") + body.count(b"[") > MAX_DEPTH and (
            len(body) <= _SCAN_BYTES or not _shallow(body)):
        check_depth(data)  # the walk also names the field that nests too deep
    return data


# Past this size the nesting is first measured on the bytes (`_shallow`): the walk costs a
# microsecond of Python per object, half a second for the ~500,000 parts 16 MiB can hold.
_SCAN_BYTES = 64 * 1024
_ESCAPES = (b"\\\\", b"\\\"")  # an escaped backslash, an escaped quote
_STRUCTURE = bytes.maketrans(b"[{]}", b"(())")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}",:')


def _shallow(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON `body` (already parsed: valid) nests at most `limit` levels, found with
    a few linear C-speed passes over its bytes; False also when it cannot tell cheaply (a
    body of more strings than a quarter of its bytes, some holding brackets), and the walk
    decides. Escapes go first (backslash pairs, then escaped quotes: a run of backslashes
    only ever occurs inside a string), then strings and everything but brackets. Then each
    pass that removes every `()` takes exactly one level off the deepest container."""
    # `find`, not `in` (here and below): a `bytes in bytes` test makes and drops a TypeError
    # first (core/events/sse.py `DataDecoder.feed` says more).
    if body.find(b"\\") >= 0:
        for escape in _ESCAPES:
            body = body.replace(escape, b"")
    # Commas and colons kept for a moment: they stand between any two strings, so `""` here is
    # exactly a string without brackets, taken away whole; what quotes are left belong to
    # strings holding brackets (code, `[[...]]`), in pairs, their brackets between them.
    marks = body.translate(_STRUCTURE, _NOT_STRUCTURE).replace(b'""', b"").translate(None, b",:")
    if marks.find(b'"') >= 0:
        # A piece is a pointer (empty and one-byte pieces are shared): past this many the walk
        # decides, cheaper then.
        if marks.count(b'"') > len(body) // 4 + 1024:
            return False
        marks = b"".join(marks.split(b'"')[::2])
    rest = marks
    for _ in range(limit):
        if not rest:
            return True
        rest = rest.replace(b"()", b"")
    return not rest


def check_depth(data: dict[str, Any], limit: int = MAX_DEPTH) -> None:
    """Raises a 400 naming the top-level field whose value nests deeper than `limit` levels
    (the body object itself is level 1). Iterative: no recursion however deep the input."""
    for key, value in data.items():
        if not isinstance(value, dict | list):
            continue
        stack: list[tuple[Any, int]] = [(value, 2)]
        while stack:
            node, depth = stack.pop()
            if depth > limit:
                raise InvalidRequest(
                    f"Invalid '{key}': the value is nested too deeply (more than {limit} "
                    "levels of objects and arrays in the request body).", param=key,
                    code="nesting_too_deep")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children
                         if isinstance(child, dict | list))
