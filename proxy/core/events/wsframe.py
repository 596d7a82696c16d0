"""Client frames of the Responses WebSocket mode: what a text frame asks for.

`response.create` runs a response and `response.steer` adds input to a running one (steer.py);
a frame of another type is ignored (Codex sends `response.processed` and `response.append`).
A frame that is not a JSON object with a string `type` is an error naming `type`, as a create
body's errors name their field. A frame's size is counted in bytes, as an HTTP body's is
(`--max-body-bytes`), whatever the frame's kind.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import InvalidRequest
from proxy.core.request.jsonbody import check_depth

CREATE = "response.create"

# The most bytes one character takes in UTF-8.
_UTF8_MAX = 4


def frame_over(data: str | bytes, limit: int) -> bool:
    """Whether a frame is larger than `limit` bytes on the wire.

    A text frame arrives decoded (a str): its character count is a lower bound of its UTF-8
    size and four times that an upper bound, so only a frame between the two is encoded (once,
    to measure it) and a typical frame is judged without a copy.
    """
    if isinstance(data, bytes) or len(data) > limit:
        return len(data) > limit
    if len(data) * _UTF8_MAX <= limit:
        return False
    return len(data.encode("utf-8", "surrogatepass")) > limit


def parse_frame(data: str | bytes) -> tuple[str, dict[str, Any]]:
    """(type, the rest of the frame). For `response.create` the rest is the create body, with
    `stream` dropped (a socket always streams) and `background: true` refused."""
    try:
        frame = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidRequest("The frame is not valid JSON.", code="invalid_json") from None
    if not isinstance(frame, dict):
        raise InvalidRequest("A frame must be a JSON object with a 'type'.", param="type")
    check_depth(frame)  # the bound of every HTTP body (core/request/jsonbody.py)
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
