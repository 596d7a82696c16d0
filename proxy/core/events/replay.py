"""A complete, valid event sequence rebuilt from a final Response object.

Used when a stored response has no event log to replay (it was not streamed, or its log has
expired) and for cache hits: the same canonical order the assembler produces
(docs/protocol.md §3.4), one delta per content part carrying its whole text. Deterministic, so
every replay of one object is identical, sequence numbers included.
"""

from __future__ import annotations

from typing import Any

from proxy.core import types as t
from proxy.core.compaction import COMPACTION
from proxy.core.compaction import item_events as compaction_events
from proxy.core.events.assembler.logprobs import event_logprobs
from proxy.core.events.summaries import summary_events
from proxy.core.hosted import kind_of_item, streamed_events
from proxy.core.types import Event, Item, ResponseObject


def events_from_response(response: ResponseObject) -> list[Event]:
    status = response.get("status")
    if status not in t.TERMINAL_STATUSES:
        raise ValueError(f"cannot rebuild the events of a {status} response")
    out: list[Event] = []

    def add(event: dict[str, Any]) -> None:
        event["sequence_number"] = len(out)
        out.append(event)

    start = {**response, "output": [], "usage": None, "error": None,
             "incomplete_details": None, "status": t.S_IN_PROGRESS}
    start["completed_at"] = None  # always present, null until completed (docs/contract.md)
    if response.get("background"):
        queued = {**start, "status": t.S_QUEUED}
        add({"type": t.CREATED, "response": queued})
        add({"type": t.QUEUED, "response": queued})
    else:
        add({"type": t.CREATED, "response": start})
    add({"type": t.IN_PROGRESS, "response": start})
    for index, item in enumerate(response.get("output") or []):
        for event in _item_events(item, index):
            add(event)
    add({"type": t.TERMINAL_OF_STATUS[status], "response": response})
    return out


def _item_events(item: Item, index: int) -> list[dict[str, Any]]:
    kind = item.get("type")
    where = {"item_id": item.get("id"), "output_index": index}
    if kind in (t.FUNCTION_CALL, t.CUSTOM_TOOL_CALL):
        # A call's text streams in one delta: `arguments` (function) or `input` (custom).
        field, delta, done = (("arguments", t.ARGS_DELTA, t.ARGS_DONE) if kind == t.FUNCTION_CALL
                              else ("input", t.CUSTOM_INPUT_DELTA, t.CUSTOM_INPUT_DONE))
        text = item.get(field, "")
        finished = {"type": done, **where, field: text}
        if kind == t.FUNCTION_CALL:
            finished["name"] = item.get("name")
        return [
            {"type": t.ITEM_ADDED, "output_index": index,
             "item": {**item, field: "", "status": t.S_IN_PROGRESS}},
            {"type": delta, **where, "delta": text},
            finished,
            {"type": t.ITEM_DONE, "output_index": index, "item": item},
        ]
    if kind in (t.MESSAGE, t.REASONING):
        opened = {**item, "content": [], "status": t.S_IN_PROGRESS}
        opened.pop("encrypted_content", None)
        if kind == t.REASONING:
            opened["summary"] = []
        events: list[dict[str, Any]] = [{"type": t.ITEM_ADDED, "output_index": index,
                                         "item": opened}]
        for content_index, part in enumerate(item.get("content") or []):
            events += _part_events(part, where, content_index)
        if kind == t.REASONING:
            events += summary_events(item, index)
        events.append({"type": t.ITEM_DONE, "output_index": index, "item": item})
        return events
    if kind == COMPACTION:  # as it streamed live, `response.compaction.compacting` included
        return compaction_events(item, index, lambda: 0)
    hosted = kind_of_item(kind)
    if hosted is not None:  # as it ran live: added in progress, searching only if it ran
        started, running, ended = hosted.events
        ran = item.get("status") in (t.S_COMPLETED, t.S_FAILED)
        return [{"type": t.ITEM_ADDED, "output_index": index,
                 "item": {**item, "status": t.S_IN_PROGRESS}},
                {"type": started, **where},
                *({"type": streamed, **where, **fields}
                  for streamed, fields in streamed_events(hosted, item)),
                *([{"type": running, **where}] if ran else []),
                {"type": ended, **where},
                {"type": t.ITEM_DONE, "output_index": index, "item": item}]
    return [{"type": t.ITEM_ADDED, "output_index": index, "item": item},
            {"type": t.ITEM_DONE, "output_index": index, "item": item}]


def _part_events(part: dict[str, Any], where: dict[str, Any],
                 content_index: int) -> list[dict[str, Any]]:
    at = {**where, "content_index": content_index}
    kind = part.get("type")
    text = part.get("text", "")
    if kind == t.OUTPUT_TEXT:
        empty = {**part, "text": "", "logprobs": [], "annotations": []}
        # The one delta carries every token's logprobs, as the done event does; citations
        # are added once the text is whole, as live (core/tools/citations.py).
        logprobs = event_logprobs(part.get("logprobs") or ())
        return [
            {"type": t.PART_ADDED, **at, "part": empty},
            {"type": t.TEXT_DELTA, **at, "delta": text, "logprobs": logprobs},
            *({"type": t.ANNOTATION_ADDED, **at, "annotation_index": n, "annotation": a}
              for n, a in enumerate(part.get("annotations") or ())),
            {"type": t.TEXT_DONE, **at, "text": text, "logprobs": logprobs},
            {"type": t.PART_DONE, **at, "part": part},
        ]
    if kind == t.REASONING_TEXT:
        return [
            {"type": t.PART_ADDED, **at, "part": {**part, "text": ""}},
            {"type": t.REASONING_DELTA, **at, "delta": text},
            {"type": t.REASONING_DONE, **at, "text": text},
            {"type": t.PART_DONE, **at, "part": part},
        ]
    # refusal and other parts: no deltas in our vocabulary, just the part
    return [{"type": t.PART_ADDED, **at, "part": part}, {"type": t.PART_DONE, **at, "part": part}]
