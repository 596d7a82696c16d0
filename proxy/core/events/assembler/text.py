"""Items with one text part: the assistant's message and a reasoning item."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from proxy.core import types as t
from proxy.core.events.assembler.item import STREAMING, TEXT_DONE, Numbering, OpenItem
from proxy.core.events.assembler.logprobs import Logprob, event_logprobs
from proxy.core.events.assembler.machine import Phase
from proxy.core.events.summaries import summary_part
from proxy.core.hosted import Source
from proxy.core.tools.citations import cite
from proxy.core.types import Event, Item

_EMPTY_LIST: list[Any] = []  # never mutated; shared to save an allocation per delta


def output_text(text: str, logprobs: list[Logprob] | None = None) -> dict[str, Any]:
    return {"type": t.OUTPUT_TEXT, "annotations": [], "logprobs": logprobs or [], "text": text}


class TextItem(OpenItem):
    """An item whose content is one part (content_index 0) streamed as deltas."""

    __slots__ = ()
    # The part's done event and the field that says which part: a content part by default.
    part_done: ClassVar[str] = t.PART_DONE
    part_index: ClassVar[str] = "content_index"

    def _text_done(self, text: str, events: list[Event]) -> None:
        """The part's text done event (and the empty delta before it if it had none)."""
        raise NotImplementedError

    def close_part(self, part: dict[str, Any], events: list[Event]) -> None:
        """The done events of the one part, those not yet sent (a live item has all to come;
        one restored from a log may have some already)."""
        if self.stage == STREAMING:
            self._text_done(part["text"], events)
        if STREAMING <= self.stage <= TEXT_DONE:
            events.append(self.event(self.part_done, **{self.part_index: 0}, part=part))


class MessageItem(TextItem):
    # The part's logprobs so far (core/events/assembler/logprobs.py); None until a delta
    # brings some, which it does only when the request included them. `sources`: what the
    # response's hosted tools found (core/hosted.py), which the text may cite: its
    # annotations are made once, when the text is whole (core/tools/citations.py).
    __slots__ = ("_annotations", "logprobs", "sources")
    kind = Phase.MESSAGE

    def __init__(self, item_id: str, index: int, seq: Numbering, stage: int = STREAMING) -> None:
        super().__init__(item_id, index, seq, stage)
        self.logprobs: list[Logprob] | None = None
        self.sources: list[Source] | None = None
        self._annotations: list[dict[str, Any]] = []

    def open(self, events: list[Event]) -> None:
        events.append(self.added({"id": self.item_id, "type": t.MESSAGE,
                                  "status": t.S_IN_PROGRESS, "content": [],
                                  "role": "assistant"}))
        events.append(self.event(t.PART_ADDED, content_index=0, part=output_text("")))

    def delta(self, text: str, events: list[Event],
              logprobs: list[Logprob] | None = None) -> None:
        """`logprobs`: this fragment's, part-shaped; None (no logprobs asked) costs nothing."""
        self.parts.append(text)
        seq = self.seq
        number = seq.next
        seq.next = number + 1
        shown = _EMPTY_LIST
        if logprobs:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs += logprobs
            shown = event_logprobs(logprobs)
        events.append({"type": t.TEXT_DELTA, "sequence_number": number,
                       "item_id": self.item_id, "output_index": self.index, "content_index": 0,
                       "delta": text, "logprobs": shown})

    def _text_done(self, text: str, events: list[Event]) -> None:
        if not self.parts:  # a restored part cut before its first delta
            events.append(self.event(t.TEXT_DELTA, content_index=0, delta="", logprobs=[]))
        for number, annotation in enumerate(self._annotations):
            events.append(self.event(t.ANNOTATION_ADDED, content_index=0,
                                     annotation_index=number, annotation=annotation))
        events.append(self.event(t.TEXT_DONE, content_index=0, text=text,
                                 logprobs=event_logprobs(self.logprobs or ())))

    def close(self, status: str, events: list[Event]) -> Item:
        part = output_text("".join(self.parts), self.logprobs)
        if self.sources:
            self._annotations = part["annotations"] = cite(part["text"], self.sources)
        self.close_part(part, events)
        return {"id": self.item_id, "type": t.MESSAGE, "status": status,
                "content": [part] if self.stage >= STREAMING else [], "role": "assistant"}


class ReasoningItem(TextItem):
    """Reasoning text as the item's one `reasoning_text` content part (the default); sealed
    into `encrypted_content` when the proxy seals."""

    __slots__ = ("seal",)
    kind = Phase.REASONING
    # The part's events (SummarisedReasoningItem streams the same text as a summary part).
    delta_type: ClassVar[str] = t.REASONING_DELTA
    done_type: ClassVar[str] = t.REASONING_DONE

    def __init__(self, item_id: str, index: int, seq: Numbering, stage: int = STREAMING, *,
                 seal: Callable[[str], str] | None = None) -> None:
        super().__init__(item_id, index, seq, stage)
        self.seal = seal

    def part(self, text: str) -> dict[str, Any]:
        return {"type": t.REASONING_TEXT, "text": text}

    def open(self, events: list[Event]) -> None:
        events.append(self.added({"id": self.item_id, "type": t.REASONING, "summary": [],
                                  "content": [], "status": t.S_IN_PROGRESS}))
        added = t.SUMMARY_PART_ADDED if self.part_done == t.SUMMARY_PART_DONE else t.PART_ADDED
        events.append(self.event(added, **{self.part_index: 0}, part=self.part("")))

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)
        seq = self.seq
        number = seq.next
        seq.next = number + 1
        events.append({"type": self.delta_type, "sequence_number": number,
                       "item_id": self.item_id, "output_index": self.index,
                       self.part_index: 0, "delta": text})

    def _text_done(self, text: str, events: list[Event]) -> None:
        at = {self.part_index: 0}
        if not self.parts:  # a restored part cut before its first delta
            events.append(self.event(self.delta_type, **at, delta=""))
        events.append(self.event(self.done_type, **at, text=text))

    def close(self, status: str, events: list[Event]) -> Item:
        text = "".join(self.parts)
        part = self.part(text)
        self.close_part(part, events)
        shown = [part] if self.stage >= STREAMING else []
        summarised = self.part_done == t.SUMMARY_PART_DONE  # the text once: here or there
        final: Item = {"id": self.item_id, "type": t.REASONING,
                       "summary": shown if summarised else [],
                       "content": [] if summarised else shown, "status": status}
        if self.seal is not None:
            final["encrypted_content"] = self.seal(text)
        return final


class SummarisedReasoningItem(ReasoningItem):
    """Reasoning text as the item's one `summary_text` part, when the request asked for
    summaries (core/events/summaries.py): the same text is never also a `reasoning_text`
    content part (llama-index and others show both, so it appeared twice)."""

    __slots__ = ()
    part_done = t.SUMMARY_PART_DONE
    part_index = "summary_index"
    delta_type = t.SUMMARY_DELTA
    done_type = t.SUMMARY_DONE

    def part(self, text: str) -> dict[str, Any]:
        return summary_part(text)
