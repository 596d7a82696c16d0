"""Client frames of the Responses WebSocket mode: what a text frame asks for.

Only `response.create` does anything; a frame of another type is ignored (Codex sends
`response.processed` and `response.append`). A frame that is not a JSON object with a string
`type` is an error naming `type`, as a create body's errors name their field.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import InvalidRequest
from proxy.core.jsonbody import check_depth

CREATE = "response.create"


def parse_frame(data: str | bytes) -> tuple[str, dict[str, Any]]:
    """(type, the rest of the frame). For `response.create` the rest is the create body, with
    `stream` dropped (a socket always streams) and `background: true` refused."""
    try:
        frame = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidRequest("The frame is not valid JSON.", code="invalid_json") from None
    if not isinstance(frame, dict):
        raise InvalidRequest("A frame must be a JSON object with a 'type'.", param="type")
    check_depth(frame)  # the bound of every HTTP body (core/jsonbody.py)
    kind = frame.pop("type", None)
    if not isinstance(kind, str):
        raise InvalidRequest("Missing required parameter: 'type'.", param="type",
                             code="missing_required_parameter")
    if kind == CREATE:
        frame.pop("stream", None)
        if frame.get("background") is True:
            raise InvalidRequest("'background' is not supported in WebSocket mode.",
                                 param="background")
        frame.pop("background", None)
    return kind, frame
