"""Stream conformance checks shared by unit, integration and e2e tests.

- `check_invariants`: docs/protocol.md §3.5 (sequence numbers, nesting, text equality, final
  output).
- `check_vllm_rules`: vLLM's own `validate_streaming_event_stack` rules (docs/protocol.md §5:
  pairing, ordering, field consistency), with `response.incomplete`, `.failed` and `.cancelled`
  accepted as terminals and background streams' `response.queued` allowed second.
- `validate_with_sdk`: every event through the official `openai` SDK's pydantic types, strictly;
  `validate_ws_frames` the same for WebSocket frames (the package's server event union).
"""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response, ResponsesServerEvent, ResponseStreamEvent
from pydantic import TypeAdapter

TERMINALS = {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
STATUS = {"response.completed": "completed", "response.incomplete": "incomplete",
          "response.failed": "failed", "response.cancelled": "cancelled"}
PAIRS = {
    "response.completed": "response.created",
    "response.incomplete": "response.created",
    "response.failed": "response.created",
    "response.cancelled": "response.created",
    "response.output_item.done": "response.output_item.added",
    "response.content_part.done": "response.content_part.added",
    "response.output_text.done": "response.output_text.delta",
    "response.reasoning_text.done": "response.reasoning_text.delta",
    "response.function_call_arguments.done": "response.function_call_arguments.delta",
    "response.custom_tool_call_input.done": "response.custom_tool_call_input.delta",
    # MCP tools run by the proxy: in_progress opens, completed or failed closes
    "response.mcp_call_arguments.done": "response.mcp_call_arguments.delta",
    "response.mcp_call.completed": "response.mcp_call.in_progress",
    "response.mcp_call.failed": "response.mcp_call.in_progress",
    "response.mcp_list_tools.completed": "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.failed": "response.mcp_list_tools.in_progress",
    # hosted tools run by the proxy (web search): in_progress opens, completed closes
    "response.web_search_call.completed": "response.web_search_call.in_progress",
    "response.file_search_call.completed": "response.file_search_call.in_progress",
    "response.code_interpreter_call.completed": "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call_code.done": "response.code_interpreter_call_code.delta",
}
ARGS_DONE = "response.function_call_arguments.done"
DELTAS = {"response.output_text.delta", "response.reasoning_text.delta",
          "response.function_call_arguments.delta", "response.custom_tool_call_input.delta",
          "response.mcp_call_arguments.delta", "response.code_interpreter_call_code.delta"}
STARTS = {start for start in PAIRS.values() if start not in DELTAS}
LIFECYCLE = {"response.created", "response.in_progress", "response.queued", *TERMINALS}

_EVENT = TypeAdapter(ResponseStreamEvent)
# What a WebSocket sends: the stream events with the lane's `stream_id`, the `error` event
# (`error.code|message|param|type`, `status`, `stream_id`) and the steering events.
_WS_EVENT = TypeAdapter(ResponsesServerEvent)


# Error codes OpenAI sends on `response.failed` that the SDK's `ResponseError.code` Literal
# does not list (the SDK's own parsing keeps them; only strict validation refuses them). Codex
# keys its context handling on this one (docs/contract.md "Request tolerance").
_CODES_BEYOND_THE_LITERAL = {"context_length_exceeded"}


def _with_listed_code(event: dict[str, Any]) -> dict[str, Any]:
    error = (event.get("response") or {}).get("error")
    if not error or error.get("code") not in _CODES_BEYOND_THE_LITERAL:
        return event
    return {**event, "response": {**event["response"],
                                  "error": {**error, "code": "server_error"}}}


def validate_with_sdk(events: list[dict[str, Any]]) -> None:
    for event in map(_with_listed_code, events):
        if event["type"] == "response.cancelled":  # not in the SDK's union; its body is
            Response.model_validate(event["response"], strict=True)
            continue
        _EVENT.validate_python(event, strict=True)
        if "response" in event:
            Response.model_validate(event["response"], strict=True)


def validate_ws_frames(frames: list[dict[str, Any]]) -> None:
    """Every frame through the package's WebSocket server event union, strictly."""
    for frame in map(_with_listed_code, frames):
        if frame["type"] == "response.cancelled":
            Response.model_validate(frame["response"], strict=True)
            continue
        _WS_EVENT.validate_python(frame, strict=True)
        if "response" in frame:
            Response.model_validate(frame["response"], strict=True)


def check_invariants(events: list[dict[str, Any]], *, first_seq: int = 0) -> None:
    assert events, "no events"
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(first_seq, first_seq + len(events))), seqs
    if first_seq == 0:
        assert events[0]["type"] == "response.created"
    terminals = [i for i, e in enumerate(events) if e["type"] in TERMINALS]
    assert terminals == [len(events) - 1], [events[i]["type"] for i in terminals]
    final = events[-1]["response"]
    assert final["status"] == STATUS[events[-1]["type"]]
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert len(ids) == 1, ids

    done_items: list[dict[str, Any]] = []
    open_item: dict[str, Any] | None = None
    open_part: int | None = None
    texts: dict[tuple[str, int], list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert open_item is None, "two items open at once"
            assert event["output_index"] == len(done_items), "output_index not dense"
            open_item = event["item"]
        elif kind == "response.output_item.done":
            assert open_item is not None and open_part is None
            assert event["item"]["id"] == open_item["id"]
            assert event["item"]["type"] == open_item["type"]
            assert event["output_index"] == len(done_items)
            done_items.append(event["item"])
            open_item = None
        elif kind == "response.content_part.added":
            assert open_item is not None and open_part is None
            open_part = event["content_index"]
        elif kind == "response.content_part.done":
            assert open_part == event["content_index"]
            open_part = None
        elif kind in DELTAS or (kind.endswith(".done") and kind in PAIRS):
            assert open_item is not None
            assert event["item_id"] == open_item["id"]
            key = (event["item_id"], event.get("content_index", 0))
            if kind in DELTAS:
                texts.setdefault(key, []).append(event["delta"])
            else:
                full = event.get("text", event.get("arguments", event.get("input",
                                                                          event.get("code"))))
                assert full == "".join(texts.get(key, [])), "done text != joined deltas"
    assert open_item is None and open_part is None, "stream ended with an open item or part"
    assert final["output"] == done_items, "final output differs from the items done"
    for item in done_items:
        if item["type"] == "message":
            joined = "".join(texts.get((item["id"], 0), []))
            assert (item["content"][0]["text"] if item["content"] else "") == joined


def check_vllm_rules(events: list[dict[str, Any]]) -> None:
    """vLLM's `validate_streaming_event_stack`, terminals widened (PR #45386's direction)."""
    # 1. pairing on a stack; consecutive deltas share a slot
    stack: list[str] = []
    for event in events:
        kind = event["type"]
        if kind == ARGS_DONE and event["arguments"] == "" and stack[-1:] != [PAIRS[kind]]:
            continue  # a call cut before any arguments: no empty delta, as OpenAI
        if kind in PAIRS:
            assert stack and stack[-1] == PAIRS[kind], (kind, stack)
            stack.pop()
        elif kind in STARTS or (kind in DELTAS and (not stack or stack[-1] != kind)):
            stack.append(kind)
    assert stack == [], stack
    # 2. ordering
    assert len(events) >= 2
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in TERMINALS
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1
    assert sum(types.count(t) for t in TERMINALS) == 1
    if "response.queued" in types:
        assert types.index("response.queued") == 1
        if "response.in_progress" in types:
            assert types.index("response.in_progress") == 2
    elif "response.in_progress" in types:
        assert types.index("response.in_progress") == 1
    # 3. field consistency
    current_id: str | None = None
    current_index = -1
    current_content: int | None = None
    for event in events:
        kind = event["type"]
        if kind in LIFECYCLE:
            continue
        if kind == "response.output_item.added":
            assert event["item"].get("id"), "item without id"
            assert event["output_index"] >= current_index
            current_id, current_index = event["item"]["id"], event["output_index"]
            current_content = None
        elif kind == "response.output_item.done":
            assert event["item"]["id"] == current_id and event["output_index"] == current_index
        elif kind == "response.content_part.added":
            current_content = event["content_index"]
            assert event["item_id"] == current_id and event["output_index"] == current_index
        else:
            assert event["item_id"] == current_id, (kind, event["item_id"], current_id)
            assert event["output_index"] == current_index
            if "content_index" in event:
                assert event["content_index"] == current_content


def check_summaries(events: list[dict[str, Any]]) -> None:
    """Reasoning summary parts (`response.reasoning_summary_*`): each inside its item, added
    once, done once, done text == joined deltas, and the item's final `summary` is those
    parts. (Interleaved with the reasoning_text events, which vLLM's stack rule would not
    allow, so they are checked here instead.)"""
    open_item: str | None = None
    state: dict[tuple[str, int], str] = {}
    texts: dict[tuple[str, int], list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "response.output_item.added":
            open_item = event["item"]["id"]
        elif kind.startswith("response.reasoning_summary_"):
            assert event["item_id"] == open_item, (kind, "outside its item")
            key = (event["item_id"], event["summary_index"])
            if kind == "response.reasoning_summary_part.added":
                assert key not in state and event["part"]["text"] == ""
                state[key], texts[key] = "open", []
            elif kind == "response.reasoning_summary_text.delta":
                assert state.get(key) == "open", (kind, state.get(key))
                texts[key].append(event["delta"])
            elif kind == "response.reasoning_summary_text.done":
                assert state.get(key) == "open" and event["text"] == "".join(texts[key])
                state[key] = "text_done"
            elif kind == "response.reasoning_summary_part.done":
                assert state.get(key) in ("open", "text_done")
                assert event["part"]["text"] == "".join(texts[key])
                state[key] = "done"
        elif kind == "response.output_item.done":
            item = event["item"]
            mine = sorted(k for k in state if k[0] == item["id"])
            assert all(state[k] == "done" for k in mine), "summary part left open"
            if mine:
                assert item["summary"] == [{"type": "summary_text", "text": "".join(texts[k])}
                                           for k in mine]
            open_item = None


def check_stream(events: list[dict[str, Any]], *, first_seq: int = 0) -> None:
    """All three, for a complete stream."""
    validate_with_sdk(events)
    check_invariants(events, first_seq=first_seq)
    check_summaries(events)
    if first_seq == 0:
        check_vllm_rules(events)
