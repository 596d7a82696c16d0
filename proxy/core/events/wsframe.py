"""Frames of the Responses WebSocket mode: what a client's text frame asks for, and the
envelope the server puts around what it sends back.

A frame that is not a JSON object with a string `type` is an error naming `type`, as a create
body's errors name their field; what a frame of a known type does is the connection's business
(web/socket/connection.py: `response.create` runs a response, `response.steer` adds input to a
running one, core/events/steer.py), and a type it does not know is ignored (Codex sends
`response.processed` and `response.append`). A frame's size is counted in bytes, as an HTTP
body's is (`--max-body-bytes`), whatever the frame's kind.

A `response.create` frame is a create body plus the socket's own envelope: `stream` (a socket
always streams: dropped), `background` (refused) and `stream_id`, the lane the response runs on.
Every event of a lane's response echoes its `stream_id`: the service encodes each event once
(core/types.py `EventBatch`), so the field is spliced into those bytes (`tagged`), not parsed
and encoded again, and only for lane responses.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import InvalidRequest, ProxyError
from proxy.core.request.fields import opt_str
from proxy.core.request.jsonbody import check_depth

CREATE = "response.create"
STREAM_ID = "stream_id"
# Every event of a lane's response carries it: long enough for any naming scheme (a UUID, a
# path-like name), short enough that echoing it does not swell each delta's frame.
MAX_STREAM_ID = 128

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
    """(type, the rest of the frame)."""
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
    return kind, frame


def take_stream_id(frame: dict[str, Any]) -> str | None:
    """The lane a `response.create` names (None: the connection's unnamed one), taken out of
    the frame: it routes the response and is no create parameter."""
    stream_id = opt_str(frame, STREAM_ID, max_len=MAX_STREAM_ID)
    frame.pop(STREAM_ID, None)
    if stream_id == "":
        raise InvalidRequest(f"Invalid '{STREAM_ID}': empty string.", param=STREAM_ID)
    return stream_id


def create_body(frame: dict[str, Any]) -> dict[str, Any]:
    """The create body of a `response.create` frame (its `stream_id` taken already): `stream`
    dropped, `background: true` refused."""
    frame.pop("stream", None)
    if frame.get("background") is True:
        raise InvalidRequest("'background' is not supported in WebSocket mode.",
                             param="background")
    frame.pop("background", None)
    return frame


def stream_tag(stream_id: str) -> bytes:
    """What `tagged` puts at the end of each of a lane's events: `,"stream_id":"…"}`."""
    return b',"' + STREAM_ID.encode() + b'":' + orjson.dumps(stream_id) + b"}"


def tagged(event: bytes, tag: bytes) -> bytes:
    """An encoded event (a non-empty JSON object, as the service encodes every event) with the
    lane's `stream_tag` spliced in before its closing brace: one copy, nothing parsed."""
    return event[:-1] + tag


def error_frame(error: ProxyError, stream_id: str | None = None) -> bytes:
    """The WebSocket `error` event: `{"type": "error", "status", "error": {"message", "type",
    "param", "code"}}`, and the lane's `stream_id` when the error is about a lane's create."""
    frame: dict[str, Any] = {"type": "error", "status": error.status, **error.body()}
    if stream_id is not None:
        frame[STREAM_ID] = stream_id
    return orjson.dumps(frame)
