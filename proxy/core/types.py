"""Names on the wire, in one place: Responses event types, statuses, item and part types.

Events and items travel as plain dicts (they are serialized with orjson on the hot path, and a
dataclass per event would cost an allocation and a conversion for nothing). These aliases say
what a dict is meant to hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

Event = dict[str, Any]
Item = dict[str, Any]
ResponseObject = dict[str, Any]
Chunk = dict[str, Any]

# -- events on their way out ----------------------------------------------------------------
# An event as it leaves the service that made it: its type and its JSON, serialized once (the
# very bytes the event log keeps as a `StoredEvent`). A batch is the events of one upstream read
# (or one page of a log), in order; a stream of batches is what a service hands a transport.
# The SSE response frames each batch as one write (core/events/sse.py `frames`); the WebSocket sends
# each JSON as one text frame and knows the terminal event by its type (`TERMINAL_EVENTS`).
EncodedEvent = tuple[str, bytes]
EventBatch = list[EncodedEvent]
EventBatches = AsyncIterator[EventBatch]

# -- lifecycle events (carry a full `response`) ---------------------------------------------
CREATED: Final = "response.created"
QUEUED: Final = "response.queued"
IN_PROGRESS: Final = "response.in_progress"
COMPLETED: Final = "response.completed"
INCOMPLETE: Final = "response.incomplete"
FAILED: Final = "response.failed"
# Not in the SDK's union (it has no cancel event); it tolerates unknown types and docs/contract.md
# names this one, carrying `response.status == "cancelled"`.
CANCELLED: Final = "response.cancelled"
TERMINAL_EVENTS: Final = frozenset({COMPLETED, INCOMPLETE, FAILED, CANCELLED})

# -- item events ----------------------------------------------------------------------------
ITEM_ADDED: Final = "response.output_item.added"
ITEM_DONE: Final = "response.output_item.done"
PART_ADDED: Final = "response.content_part.added"
PART_DONE: Final = "response.content_part.done"
TEXT_DELTA: Final = "response.output_text.delta"
TEXT_DONE: Final = "response.output_text.done"
# A citation on the answer's text (core/tools/citations.py), once the text is whole.
ANNOTATION_ADDED: Final = "response.output_text.annotation.added"
REASONING_DELTA: Final = "response.reasoning_text.delta"
REASONING_DONE: Final = "response.reasoning_text.done"
ARGS_DELTA: Final = "response.function_call_arguments.delta"
ARGS_DONE: Final = "response.function_call_arguments.done"
# Reasoning summaries (core/events/summaries.py): the reasoning text again, as `summary_text`.
SUMMARY_PART_ADDED: Final = "response.reasoning_summary_part.added"
SUMMARY_PART_DONE: Final = "response.reasoning_summary_part.done"
SUMMARY_DELTA: Final = "response.reasoning_summary_text.delta"
SUMMARY_DONE: Final = "response.reasoning_summary_text.done"

# -- statuses -------------------------------------------------------------------------------
S_QUEUED: Final = "queued"
S_IN_PROGRESS: Final = "in_progress"
S_COMPLETED: Final = "completed"
S_INCOMPLETE: Final = "incomplete"
S_FAILED: Final = "failed"
S_CANCELLED: Final = "cancelled"
TERMINAL_STATUSES: Final = frozenset({S_COMPLETED, S_INCOMPLETE, S_FAILED, S_CANCELLED})
STATUS_OF_TERMINAL: Final = {
    COMPLETED: S_COMPLETED,
    INCOMPLETE: S_INCOMPLETE,
    FAILED: S_FAILED,
    CANCELLED: S_CANCELLED,
}
TERMINAL_OF_STATUS: Final = {status: event for event, status in STATUS_OF_TERMINAL.items()}

# -- items and parts ------------------------------------------------------------------------
MESSAGE: Final = "message"
REASONING: Final = "reasoning"
FUNCTION_CALL: Final = "function_call"
FUNCTION_CALL_OUTPUT: Final = "function_call_output"
OUTPUT_TEXT: Final = "output_text"
REASONING_TEXT: Final = "reasoning_text"

# -- custom (freeform) tools --------------------------------------------------------------------
CUSTOM_TOOL_CALL: Final = "custom_tool_call"
CUSTOM_TOOL_CALL_OUTPUT: Final = "custom_tool_call_output"
CUSTOM_INPUT_DELTA: Final = "response.custom_tool_call_input.delta"
CUSTOM_INPUT_DONE: Final = "response.custom_tool_call_input.done"
SUMMARY_TEXT: Final = "summary_text"
