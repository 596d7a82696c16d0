"""Reasoning summaries: the reasoning text also as a `summary_text` part, for clients that read
only summaries (the Vercel AI SDK shows reasoning from `response.reasoning_summary_*` events
alone; Codex displays summaries).

A vLLM fleet has no summariser, so when a request sets `reasoning.summary` (`auto`, `concise`
or `detailed`) the summary IS the reasoning text: one summary part (`summary_index` 0) INSTEAD of
the `reasoning_text` content part (a text is shown once; clients such as llama-index print
both). Order of a live reasoning item with summaries (core/events/assembler/text.py):

    output_item.added (summary [], content [])
    reasoning_summary_part.added (summary_text)
    reasoning_summary_text.delta ...                one per upstream reasoning fragment
    reasoning_summary_text.done   reasoning_summary_part.done
    output_item.done (summary [summary_text], content [])

Rebuilt sequences (core/events/replay.py) give each of a stored item's parts its events, so a
stored summarised item replays the same way.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from proxy.core import types as t
from proxy.core.types import Item, ResponseObject

SUMMARY_MODES = ("auto", "concise", "detailed")


def wants_summaries(response: ResponseObject) -> bool:
    """Whether the request behind `response` (its `reasoning` echo) asked for summaries."""
    reasoning = response.get("reasoning")
    return isinstance(reasoning, dict) and reasoning.get("summary") in SUMMARY_MODES


def summary_part(text: str) -> dict[str, Any]:
    return {"type": t.SUMMARY_TEXT, "text": text}


def summary_events(item: Item, index: int) -> list[dict[str, Any]]:
    """The events of a finished reasoning item's summary parts (no sequence numbers yet), for a
    sequence rebuilt from a final object."""
    events: list[dict[str, Any]] = []
    where = {"item_id": item.get("id"), "output_index": index}
    for summary_index, part in enumerate(item.get("summary") or []):
        at = {**where, "summary_index": summary_index}
        text = str(part.get("text", ""))
        events += [
            {"type": t.SUMMARY_PART_ADDED, **at, "part": summary_part("")},
            {"type": t.SUMMARY_DELTA, **at, "delta": text},
            {"type": t.SUMMARY_DONE, **at, "text": text},
            {"type": t.SUMMARY_PART_DONE, **at, "part": summary_part(text)},
        ]
    return events
