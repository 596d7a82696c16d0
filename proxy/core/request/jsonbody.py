"""Request bodies: bytes in, a JSON object out, or an OpenAI-shaped 400 saying what is wrong.

Nesting is bounded at `MAX_DEPTH` levels. orjson itself stops at 1024, but much of the proxy
walks request JSON recursively (canonical cache keys, schema handling, deep copies), and
Python's recursion limit (1000 frames, shared with the whole call stack) sits right there: a
body 900 levels deep would parse and then fail somewhere far from here as a 500. No real
request comes near 64 levels (OpenAI's structured outputs allow 10 levels of schema nesting,
which is about 25 levels of body), so deeper bodies are refused as they arrive, by one
iterative walk that names the top-level field holding the deep part.
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
    check_depth(data)
    return data


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
