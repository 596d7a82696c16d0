"""`item_reference` input items: `{"type": "item_reference", "id": "msg_…"}` stands for an item
the same API key's stored responses already hold (an input or an output item). The Vercel AI
SDK's default multi-turn loop (`store: true`) sends its earlier assistant messages and reasoning
this way instead of repeating them.

Two steps, split at the I/O: `parse_reference` (while the request is parsed) keeps a
placeholder at the reference's position; the service fetches every referenced id at once
(`Store.find_items`) and `resolve` puts each stored item in its placeholder's place, or refuses
the request with a 400 naming `input[i].id`. From then on a resolved item is an ordinary input
item: it is translated, stored with the new response's input items and listed by `input_items`.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.request.fields import at, bad, opt_str, req_str
from proxy.core.types import Item

ITEM_REFERENCE = "item_reference"


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == ITEM_REFERENCE


def parse_reference(item: dict[str, Any], path: str) -> Item:
    """The placeholder; other keys are ignored (a reference carries nothing else)."""
    opt_str(item, "id", path, max_len=256)
    return {"type": ITEM_REFERENCE, "id": req_str(item, "id", path)}


def referenced_ids(items: list[Item]) -> list[str]:
    return [str(item["id"]) for item in items if item.get("type") == ITEM_REFERENCE]


def resolve(items: list[Item], found: Mapping[str, Item], path: str = "input") -> list[Item]:
    """`items` with each reference replaced by the stored item it names (a copy)."""
    out: list[Item] = []
    for i, item in enumerate(items):
        if item.get("type") != ITEM_REFERENCE:
            out.append(item)
            continue
        stored = found.get(str(item["id"]))
        if stored is None:
            where = at(at(path, i), "id")
            raise bad(where, f"Item with id '{item['id']}' not found.")
        out.append(dict(stored))
    return out
