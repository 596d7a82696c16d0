"""What one request expands to, bounded by `--max-body-bytes` (docs/contract.md "Multi-tenant
safety"): an expanded request may hold no more than the client could have sent inline.

A request names more than it carries: an `item_reference` stands for a stored item however
large (and the same one may be named many times), a `previous_response_id` chain or a
`conversation` for every item stored in it, a sealed blob for the text it inflates to.
`Expansion` adds up the JSON size of the history's items, of the input's items with their
references resolved, and of the text of every blob opened, and refuses the request (400
naming the parameter whose part pushed the total over: `previous_response_id`,
`conversation`, `input[i].id`, `input[i].encrypted_content`, or `input` for inline items) as
soon as the total passes the limit. The service runs it right after its store reads and before
anything is translated, serialised, sent upstream or stored (a background create stores its
expanded input).

It also makes the two forms of the request's items: as stored (references resolved, blobs kept
sealed, as the client sent them) and as translated (reasoning blobs opened into `content`,
core/request/items.py `open_reasoning`). Compaction blobs are opened and counted here too; the
compactor opens them again when it expands them (a summary is small and capped).

Sizes: each item is measured once as orjson bytes (a stored item named by K references is
measured once and counted K times). A request that expands nothing (no history, no reference,
no blob) is not measured at all: its input is the body, which the body limit already bounds.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from proxy.core import compaction
from proxy.core.errors import InvalidRequest
from proxy.core.request.fields import at
from proxy.core.request.items import open_reasoning
from proxy.core.request.references import ITEM_REFERENCE, resolve
from proxy.core.seal import Sealer
from proxy.core.types import Item


class Expansion:
    """One request's expansion budget (make one per request)."""

    def __init__(self, limit: int, sealer: Sealer) -> None:
        self.limit = limit
        self.used = 0
        self._sealer = sealer

    @property
    def left(self) -> int:
        """What the request may still expand by: a file larger than this is refused before it
        is read (services/responses/inputs.py)."""
        return max(0, self.limit - self.used)

    def spend(self, size: int, param: str) -> None:
        self.used += size
        if self.used > self.limit:
            raise InvalidRequest(
                f"Invalid '{param}': this request expands to more than {self.limit} bytes "
                "(--max-body-bytes) once its item references, previous responses, "
                "conversation and sealed content are counted.", param=param)

    def history(self, items: Sequence[Item], param: str) -> list[Item]:
        """The history (`param`: where it came from) to translate, counted, blobs opened."""
        out: list[Item] = []
        for item in items:
            self.spend(_size(item), param)
            out.append(self._opened(item, param))
        return out

    def input(self, items: list[Item], found: Mapping[str, Item]
              ) -> tuple[list[Item], list[Item]]:
        """(the input to store: references resolved; the input to translate: blobs opened
        too), counted. `found`: the stored items the references name (a 400 for one absent)."""
        stored = resolve(items, found)
        if not self.used and not found and not any(map(_sealed, items)):
            return stored, stored
        sizes = {item_id: _size(item) for item_id, item in found.items()}
        opened: list[Item] = []
        for i, (given, item) in enumerate(zip(items, stored, strict=True)):
            if given.get("type") == ITEM_REFERENCE:
                self.spend(sizes[str(given["id"])], at(at("input", i), "id"))
            else:
                self.spend(_size(item), "input")
            opened.append(self._opened(item, at(at("input", i), "encrypted_content")))
        return stored, opened

    def _opened(self, item: Item, where: str) -> Item:
        kind = item.get("type")
        if kind == compaction.COMPACTION:
            summary = compaction.open_summary(self._sealer, item["encrypted_content"], where)
            self.spend(len(summary.text.encode()), where)
            return item
        shown, size = open_reasoning(item, self._sealer, where)
        if size:
            self.spend(size, where)
        return shown


def _sealed(item: Item) -> bool:
    return "encrypted_content" in item


def _size(item: Item) -> int:
    return len(orjson.dumps(item))
