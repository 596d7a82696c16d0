"""What every item kind shares: identity, numbering, and how far its events went.

Each kind (text.py, calls.py, mcpitems.py) makes its own events: `open` the added ones of a
live item, `delta` those of one upstream fragment (the per-token path: one dict, no other
allocation, the sequence number taken inline), `close` the done ones not yet sent and the
final item. The assembler sends `output_item.done` itself, after appending that item to the
output, so the event's item is the very object in the final `output`.
"""

from __future__ import annotations

from typing import ClassVar

from proxy.core import types as t
from proxy.core.events.assembler.machine import Phase
from proxy.core.types import Event, Item

# How far an item's events went: ADDED (output_item.added only), STREAMING (part open /
# arguments flowing), TEXT_DONE, PART_DONE. A live item opens at STREAMING; one restored
# from a log (restore.py) may be anywhere.
ADDED, STREAMING, TEXT_DONE, PART_DONE = range(4)


class Numbering:
    """A response's sequence numbers (0, 1, 2, … no gaps, assigned when an event is made),
    one counter shared by the assembler and its items."""

    __slots__ = ("next",)

    def __init__(self, first: int) -> None:
        self.next = first

    def take(self) -> int:
        """The next number. What is made per event (here, response.py, calls.py) takes it
        inline (`number = seq.next; seq.next = number + 1`): a call less an event."""
        seq = self.next
        self.next = seq + 1
        return seq


class ItemState:
    """An item at `output_index` `index` whose events are numbered by `seq`."""

    __slots__ = ("index", "item_id", "seq")

    def __init__(self, item_id: str, index: int, seq: Numbering) -> None:
        self.item_id = item_id
        self.index = index
        self.seq = seq

    def event(self, kind: str, **fields: object) -> Event:
        """An event about this item (`item_id`, `output_index`, then `fields`)."""
        seq = self.seq
        number = seq.next
        seq.next = number + 1
        return {"type": kind, "sequence_number": number, "item_id": self.item_id,
                "output_index": self.index, **fields}

    def added(self, item: Item) -> Event:
        seq = self.seq
        number = seq.next
        seq.next = number + 1
        return {"type": t.ITEM_ADDED, "sequence_number": number, "output_index": self.index,
                "item": item}

    def done(self, item: Item) -> Event:
        seq = self.seq
        number = seq.next
        seq.next = number + 1
        return {"type": t.ITEM_DONE, "sequence_number": number, "output_index": self.index,
                "item": item}


class OpenItem(ItemState):
    """An item that streams: the fragments so far (`parts`) and its `stage`."""

    __slots__ = ("parts", "stage")
    kind: ClassVar[Phase]  # the assembler's phase while this item is open

    def __init__(self, item_id: str, index: int, seq: Numbering, stage: int = STREAMING) -> None:
        super().__init__(item_id, index, seq)
        self.parts: list[str] = []
        self.stage = stage

    def open(self, events: list[Event]) -> None:
        """The added events of a live item."""
        raise NotImplementedError

    def delta(self, text: str, events: list[Event]) -> None:
        """One upstream fragment: kept, and its delta events."""
        raise NotImplementedError

    def close(self, status: str, events: list[Event]) -> Item | None:
        """The done events not yet sent; the final item, or None when the item now waits for
        the tool loop (an MCP call whose arguments are whole: the rest of the upstream turn
        is not read, so items never interleave)."""
        raise NotImplementedError
