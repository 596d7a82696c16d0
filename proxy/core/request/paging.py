"""List endpoints' cursors (`after`, `limit`, `order`) and OpenAI's list shape.

    {"object": "list", "data": [...], "first_id", "last_id", "has_more"}

`after` is an item id, exclusive; `limit` 1-100 (default 20); `order` asc|desc (default desc,
newest first, as OpenAI). The SDK pages on by sending the last id back as `after` while
`has_more` is true. An empty page carries null ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.request.fields import bad, one_of

MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class PageRequest:
    after: str | None = None
    limit: int = 20
    order: str = "desc"


def parse_page(query: Mapping[str, str]) -> PageRequest:
    after = query.get("after") or None
    raw_limit = query.get("limit")
    limit = 20
    if raw_limit is not None:
        try:
            limit = int(raw_limit)
        except ValueError:
            raise bad("limit", f"Invalid 'limit': {raw_limit!r} is not an integer.") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise bad("limit", f"Invalid 'limit': {limit} is out of range; expected a value "
                               f"between 1 and {MAX_LIMIT}.")
    order = one_of(query.get("order") or "desc", ("asc", "desc"), "order")
    return PageRequest(after=after, limit=limit, order=order)


def paginate(items: Sequence[dict[str, Any]], page: PageRequest) -> tuple[list[Any], bool]:
    """One page of an in-memory list kept oldest first. An unknown `after` gives an empty page
    (the cursor points at nothing we have)."""
    ordered = list(items) if page.order == "asc" else list(reversed(items))
    start = 0
    if page.after is not None:
        for index, item in enumerate(ordered):
            if item.get("id") == page.after:
                start = index + 1
                break
        else:
            return [], False
    chunk = ordered[start:start + page.limit]
    return chunk, start + page.limit < len(ordered)


def list_body(data: list[Any], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
