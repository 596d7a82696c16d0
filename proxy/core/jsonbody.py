"""Request bodies: bytes in, a JSON object out, or an OpenAI-shaped 400 saying what is wrong."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import InvalidRequest


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
    return data
