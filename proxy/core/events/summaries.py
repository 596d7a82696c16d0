"""Reasoning summaries: the reasoning text also as a `summary_text` part, for clients that read
only summaries (the Vercel AI SDK shows reasoning from `response.reasoning_summary_*` events
alone; Codex displays summaries).

A vLLM fleet has no summariser, so when a request sets `reasoning.summary` (`auto`, `concise`
or `detailed`) the summary IS the reasoning text: one summary part (`summary_index` 0) carrying
the same text as the item's one `reasoning_text` content part.

Order of a live reasoning item with summaries (core/events/assembler/), streaming both at once:

    output_item.added (summary [], content [])
    content_part.added (reasoning_text)   reasoning_summary_part.added (summary_text)
    { reasoning_text.delta  reasoning_summary_text.delta }   one pair per upstream chunk
    reasoning_text.done   content_part.done
    reasoning_summary_text.done   reasoning_summary_part.done
    output_item.done (summary [summary_text], content [reasoning_text])

The SDK's stream accumulator passes summary events through untouched and the SDK's types accept
them in any order within their item; rebuilt sequences (core/events/replay.py) put the summary part
after the content part instead of interleaving them, which is as valid and simpler.

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
