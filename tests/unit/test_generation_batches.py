"""How a turn batches its first events: the start events alone while the upstream is silent,
with the first read's events when its bytes are already buffered (one write instead of two)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from proxy.services.generation.run import Generation
from proxy.services.process.loops import TaskSet
from proxy.store.base import StoredEvent
from tests.support.assembly import CREATED_AT, base_response

ROLE = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TEXT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
END = (b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
       b"data: [DONE]\n\n")


@dataclass
class Replica:
    url: str = "http://replica"
    in_flight: int = 1


@dataclass
class Upstream:
    """What a turn reads of `http1.Response`: `buffered`, `complete`, `aiter_raw`, `aclose`."""

    reads: list[bytes]
    buffered: bool = False
    complete: bool = False  # the whole body received (never, here: a tail task reads it)
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # before every read but the 1st

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for n, raw in enumerate(self.reads):
            if n > 0 or not self.buffered:
                await self.gate.wait()
            yield raw

    async def aclose(self) -> None:
        pass


@dataclass
class Call:
    response: Upstream
    replica: Replica = field(default_factory=Replica)
    span: None = None

    async def aclose(self) -> None:
        pass


def kinds(batch: list[tuple[str, bytes]]) -> list[str]:
    return [kind for kind, _ in batch]


class Recorder:
    """A stored turn's recorder, as the turn sees it: events added (a batch to its log's
    `record`), then the end written with the events before the terminal one."""

    def __init__(self) -> None:
        self.added: list[str] = []
        self.ended: str | None = None
        self.log_handle = self

    def add(self, events: list[dict[str, object]], encoded: list[tuple[str, bytes]]) -> None:
        self.added += kinds(encoded)

    record = add

    async def finish(self, final: dict[str, object], terminal: StoredEvent | None,
                     events: list[dict[str, object]] | None = None,
                     encoded: list[tuple[str, bytes]] | None = None) -> None:
        assert terminal is not None
        self.added += kinds(encoded or [])
        self.ended = terminal.type


async def batches_of(upstream: Upstream, recorder: Recorder | None = None) -> list[list[str]]:
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    turn = Generation(Call(upstream), assembler, TaskSet(),  # type: ignore[arg-type]
                      recorder=recorder)  # type: ignore[arg-type]
    out: list[list[str]] = []
    async for batch in turn.run():
        out.append(kinds(batch))
        upstream.gate.set()
    return out


async def test_a_silent_upstream_gets_the_start_events_sent_alone() -> None:
    out = await batches_of(Upstream([ROLE + TEXT, END]))
    assert out[0] == ["response.created", "response.in_progress"]
    assert out[1][:2] == ["response.output_item.added", "response.content_part.added"]
    assert out[-1][-1] == "response.completed"


async def test_buffered_first_bytes_go_out_with_the_start_events() -> None:
    out = await batches_of(Upstream([ROLE + TEXT, END], buffered=True))
    assert out[0] == ["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added", "response.output_text.delta"]
    assert out[-1][-1] == "response.completed"
    assert sum(len(b) for b in out) == sum(len(b) for b in
                                           await batches_of(Upstream([ROLE + TEXT, END])))


async def test_buffered_bytes_that_make_no_event_still_send_the_start_events() -> None:
    # Half a line: no event yet, and the next read may be far away (the first token's wait).
    out = await batches_of(Upstream([ROLE[:20], ROLE[20:] + TEXT, END], buffered=True))
    assert out[0] == ["response.created", "response.in_progress"]


async def test_a_buffered_whole_answer_sends_its_start_events_before_its_end() -> None:
    # The terminal batch waits for the stored final write; the start events go first.
    recorder = Recorder()
    out = await batches_of(Upstream([ROLE + TEXT + END], buffered=True), recorder)
    assert out[0] == ["response.created", "response.in_progress"]
    assert out[1][-1] == "response.completed" and len(out) == 2
    assert recorder.added == out[0] + out[1][:-1] and recorder.ended == "response.completed"


async def test_a_buffered_whole_answer_not_stored_is_one_batch() -> None:
    # Nothing to wait for before the end: the whole answer leaves in one write, not two.
    out = await batches_of(Upstream([ROLE + TEXT + END], buffered=True))
    assert out == [["response.created", "response.in_progress", "response.output_item.added",
                    "response.content_part.added", "response.output_text.delta",
                    "response.output_text.done", "response.content_part.done",
                    "response.output_item.done", "response.completed"]]
