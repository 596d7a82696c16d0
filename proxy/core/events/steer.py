"""Steering on the WebSocket mode (`response.steer`): the client's frame checked, and the three
events that answer it, in the `openai` package's shapes (`response_steer_*`).

A steer adds user input to a response that is running on the connection. Only user messages
are steering input (the package's own rule): content a string or `input_text`, `input_image`
and `input_file` parts; anything else, an empty input, or a frame with keys a steer does not
take (`stream_id` among them: the target response decides the lane) is `invalid_input`, and
the input goes back in `response.steer.failed` as the client sent it.

Accepted input waits in the connection's queue (services/responses/steering.py) until a
successor response commits it: an automatic one continuing the steered response, or the
client's own continuation when the response stopped for its tools (`required_input` below
names what that continuation must carry).

Deliberate choice: steer events are numbered in their own sequence per lane (0, 1, 2, ...),
apart from each response's events, whose numbers stay dense from 0 (a client checks those for
gaps, and a response's stored event log never holds a steer event).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from proxy.core import mcp
from proxy.core.errors import ProxyError
from proxy.core.ids import counter_ids
from proxy.core.request.items import parse_input
from proxy.core.types import CUSTOM_TOOL_CALL, FUNCTION_CALL, Event, Item

STEER: Final = "response.steer"
ACCEPTED: Final = "response.steer.accepted"
PENDING: Final = "response.steer.pending"
FAILED: Final = "response.steer.failed"

# `incomplete_details.reason` of a response a steer ended at a safe boundary.
STEERED: Final = "steered"
WAITING: Final = "waiting_for_required_input"

# The package's codes (`ResponseSteerErrorCode`).
NOT_FOUND: Final = "response_not_found"
INVALID: Final = "invalid_input"
NOT_SUPPORTED: Final = "steering_not_supported"
TOO_MANY: Final = "too_many_pending_steers"
ALREADY_COMPLETED: Final = "response_already_completed"
NOT_ACTIVE: Final = "response_not_active"
SUCCESSOR_FAILED: Final = "successor_creation_failed"

# Items a response ends on for the client to answer: its own tools' calls, an approval.
CLIENT_OWNED: Final = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL, mcp.APPROVAL_REQUEST})

_FRAME_KEYS = frozenset({"previous_response_id", "input"})
_MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status"})
_PARTS = frozenset({"input_text", "input_image", "input_file"})


class SteerRefused(Exception):
    """A steer that cannot be accepted: its package code and a message naming why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SteerInput:
    """A checked steer: its target and its input, as sent (what a failure returns) and as the
    user messages a successor's `input` gets."""

    previous_response_id: str
    sent: Any
    messages: list[dict[str, Any]]

    @property
    def returned(self) -> Any:
        """The input as a later failure returns it: the string as sent, or the messages each
        with its `type` (the package's shape requires it; a client may leave it out)."""
        return self.sent if isinstance(self.sent, str) else self.messages


def target_of(frame: dict[str, Any]) -> str:
    """The response a frame names ("" when it names none: what a failure then echoes)."""
    target = frame.get("previous_response_id")
    return target if isinstance(target, str) else ""


def returned_input(frame: dict[str, Any]) -> Any:
    """The frame's input for `steer.input` of a failure: as sent when it has the type the
    package declares (a string or a list), else the empty string."""
    sent = frame.get("input")
    return sent if isinstance(sent, str | list) else ""


def parse_steer(frame: dict[str, Any], *, max_items: int) -> SteerInput:
    """The frame (its `type` already taken off) checked; `SteerRefused` (`invalid_input`)
    naming the first thing wrong. Content parts are checked as a create's input items are
    (core/request/items.py), so what is accepted here is what the successor's create takes."""
    extra = sorted(set(frame) - _FRAME_KEYS)
    if extra:
        hint = (" The target response decides the lane." if "stream_id" in extra else "")
        raise SteerRefused(INVALID, f"Unknown parameter: '{extra[0]}'. A steer takes only "
                                    f"'previous_response_id' and 'input'.{hint}")
    target = frame.get("previous_response_id")
    if not isinstance(target, str) or not target:
        raise SteerRefused(INVALID, "Missing required parameter: 'previous_response_id'.")
    sent = frame.get("input")
    messages = [_user_message(sent)] if isinstance(sent, str) else _messages(sent)
    try:
        parse_input(messages, counter_ids(), max_items=max_items)
    except ProxyError as exc:  # (a 400 naming the part, as for a create)
        raise SteerRefused(INVALID, exc.message) from None
    return SteerInput(target, sent, messages)


def _user_message(text: str) -> dict[str, Any]:
    if not text:
        raise SteerRefused(INVALID, "Invalid 'input': empty; a steer adds some user input.")
    return {"type": "message", "role": "user", "content": text}


def _messages(sent: Any) -> list[dict[str, Any]]:
    if not isinstance(sent, list) or not sent:
        raise SteerRefused(INVALID, "Invalid 'input': a string or a non-empty array of user "
                                    "messages.")
    for i, item in enumerate(sent):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise SteerRefused(INVALID, f"Invalid '{where}': a message object.")
        if item.get("type", "message") != "message" or item.get("role") != "user":
            raise SteerRefused(INVALID, f"Invalid '{where}': steering input is user messages "
                                        "only (no other roles, tool outputs or item types).")
        extra = sorted(set(item) - _MESSAGE_KEYS)
        if extra:
            raise SteerRefused(INVALID, f"Unknown parameter: '{where}.{extra[0]}'.")
        content = item.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in _PARTS:
                    raise SteerRefused(INVALID, f"Invalid '{where}.content[{j}].type': "
                                                f"{kind!r}. Steering input parts may be "
                                                "'input_text', 'input_image' and 'input_file'.")
    return [{**item, "type": "message"} for item in sent]


def required_input(output: list[Item]) -> list[dict[str, Any]]:
    """The stubs of what a response that ended on client-owned items waits for, in output
    order: one per function call, custom tool call and MCP approval request."""
    stubs: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type")
        if kind == FUNCTION_CALL:
            stubs.append({"type": "function_call_output", "call_id": item["call_id"],
                          "name": item["name"]})
        elif kind == CUSTOM_TOOL_CALL:
            stubs.append({"type": "custom_tool_call_output", "call_id": item["call_id"]})
        elif kind == mcp.APPROVAL_REQUEST:
            stubs.append({"type": "mcp_approval_response", "approval_request_id": item["id"]})
    return stubs


def with_input_first(body: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A create body with queued steering messages before its own input (a string input is
    the user message it stands for)."""
    own = body.get("input")
    if own is None:
        own = []
    elif isinstance(own, str):
        own = [{"type": "message", "role": "user", "content": own}]
    elif not isinstance(own, list):
        return body  # not an input at all: the create refuses it, naming `input`
    return {**body, "input": [*messages, *own]}


def successor_body(body: dict[str, Any], previous: str,
                   messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The automatic successor's create: the steered response's own create (model, tools,
    instructions, store, ... and its lane), continuing from it with the queued input."""
    return {**body, "previous_response_id": previous, "input": messages}


def accepted(steer_id: str, previous: str, seq: int, stream_id: str | None) -> Event:
    return _lane({"type": ACCEPTED, "sequence_number": seq,
                  "steer": {"id": steer_id, "previous_response_id": previous}}, stream_id)


def pending(steer_id: str, previous: str, stubs: list[dict[str, Any]], seq: int,
            stream_id: str | None) -> Event:
    return _lane({"type": PENDING, "sequence_number": seq, "reason": WAITING,
                  "required_input": stubs,
                  "steer": {"id": steer_id, "previous_response_id": previous}}, stream_id)


def failed(code: str, message: str, previous: str, sent: Any, seq: int, *,
           steer_id: str | None = None, stream_id: str | None = None) -> Event:
    """`steer_id` None: refused before an id was given (the event then has none)."""
    steer: dict[str, Any] = {"input": sent, "previous_response_id": previous}
    if steer_id is not None:
        steer["id"] = steer_id
    return _lane({"type": FAILED, "sequence_number": seq,
                  "error": {"code": code, "message": message, "type": "invalid_request_error"},
                  "steer": steer}, stream_id)


def _lane(event: Event, stream_id: str | None) -> Event:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event
