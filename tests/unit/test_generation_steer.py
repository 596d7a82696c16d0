"""A turn steered at its safe boundary (services/generation/boundary.py, run.py `steer`): at once
while text or reasoning streams (the upstream closed, nothing more read), after a call's item
completes, never once the turn sent its finish; every event checked as a stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from proxy.services.generation.run import Generation
from proxy.services.process.loops import TaskSet
from proxy.upstream.http1 import ReadError
from tests.support.assembly import CREATED_AT, base_response
from tests.support.conformance import check_stream


def sse(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


ROLE = sse({"role": "assistant", "content": ""})
THINK = sse({"reasoning": "Let me think"})
TEXT = sse({"content": "Once upon"})
MORE = sse({"content": " a time"})
STOP = sse({}, "stop") + b"data: [DONE]\n\n"
CALL = sse({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":'}}]})
ARGS = sse({"tool_calls": [{"index": 0, "function": {"arguments": ' "Oslo"}'}}]})
CALLED = sse({}, "tool_calls") + b"data: [DONE]\n\n"
WEATHER = {"type": "function", "name": "get_weather", "parameters": {}, "strict": None}


@dataclass
class Replica:
    url: str = "http://replica"
    in_flight: int = 1


@dataclass
class Upstream:
    """`http1.Response` as a turn reads it: each read waits for the test's `step`; a close
    fails the waiting read at once, as the real one does."""

    reads: list[bytes]
    buffered: bool = False
    complete: bool = False  # the whole body received (never, here: a tail task reads it)
    closed: bool = False
    served: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for raw in self.reads:
            await self.wake.wait()
            self.wake.clear()
            if self.closed:
                raise ReadError("the response was closed while being read")
            self.served += 1
            yield raw

    def close(self) -> None:
        self.closed = True
        self.wake.set()


@dataclass
class Call:
    response: Upstream
    replica: Replica = field(default_factory=Replica)
    span: None = None

    async def aclose(self) -> None:
        self.response.close()


class Turn:
    """A turn run in a task, fed one upstream read at a time."""

    def __init__(self, reads: list[bytes], *, tools: bool = False) -> None:
        base = {**base_response(), "tools": [WEATHER] if tools else []}
        self.upstream = Upstream(reads)
        assembler = Assembler(base, ids=counter_ids(), clock=lambda: CREATED_AT)
        self.generation = Generation(Call(self.upstream), assembler,  # type: ignore[arg-type]
                                     TaskSet())
        self.events: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for batch in self.generation.run():
            self.events += [orjson.loads(data) for _, data in batch]

    async def step(self, reads: int = 1) -> None:
        """Let `reads` more upstream reads through, and the turn take them."""
        for _ in range(reads):
            self.upstream.wake.set()
            for _ in range(20):  # a few loop turns: the read, its events, the next wait
                await asyncio.sleep(0)

    async def done(self) -> list[dict[str, Any]]:
        for _ in range(len(self.upstream.reads) + 1):
            if self.task.done():
                break
            await self.step()
        await asyncio.wait_for(self.task, 5)
        check_stream(self.events)
        return self.events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def test_a_steer_mid_text_ends_the_response_at_once_steered() -> None:
    turn = Turn([ROLE + TEXT, MORE, MORE, STOP])
    await turn.step()
    assert types(turn.events)[-1] == "response.output_text.delta"
    assert await turn.generation.steer()
    events = await turn.done()
    assert turn.upstream.served == 1  # nothing read after the steer: the upstream is closed
    assert turn.upstream.closed
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "steered"}
    # The open message closed as it stood, its done events first.
    assert types(events)[-4:] == ["response.output_text.done", "response.content_part.done",
                                  "response.output_item.done", "response.incomplete"]
    message = final["response"]["output"][0]
    assert message["status"] == "incomplete"
    assert message["content"][0]["text"] == "Once upon"


async def test_a_steer_while_reasoning_ends_the_response_at_once() -> None:
    turn = Turn([THINK, THINK, TEXT, STOP])
    await turn.step()
    assert await turn.generation.steer()
    events = await turn.done()
    assert turn.upstream.served == 1
    assert events[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["reasoning"]


async def test_a_steer_before_the_first_token_ends_an_empty_response() -> None:
    turn = Turn([ROLE + TEXT, STOP])
    for _ in range(5):
        await asyncio.sleep(0)  # the start events out, the first read waiting
    assert await turn.generation.steer()
    events = await turn.done()
    assert turn.upstream.served == 0
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["output"] == []


async def test_a_steer_during_a_client_call_waits_for_it_and_the_response_completes() -> None:
    turn = Turn([CALL, ARGS, CALLED], tools=True)
    await turn.step()
    assert types(turn.events)[-1] == "response.function_call_arguments.delta"
    assert await turn.generation.steer()
    await turn.step()
    assert not turn.task.done() and not turn.upstream.closed  # the call still streams
    events = await turn.done()
    assert turn.upstream.served == 3  # read to its end: the call whole
    assert events[-1]["type"] == "response.completed"
    call = events[-1]["response"]["output"][0]
    assert call["type"] == "function_call" and call["arguments"] == '{"city": "Oslo"}'
    assert call["status"] == "completed"


async def test_text_after_a_client_call_is_cut_and_the_response_waits_for_the_output() -> None:
    turn = Turn([CALL, ARGS, TEXT, MORE, STOP], tools=True)
    await turn.step(2)
    assert await turn.generation.steer()
    await turn.step()  # the text opens: a boundary, the call item done before it
    events = await turn.done()
    assert turn.upstream.served == 3
    final = events[-1]
    assert final["type"] == "response.completed"  # it waits for the call's output
    assert [item["type"] for item in final["response"]["output"]] == ["function_call",
                                                                     "message"]
    assert final["response"]["output"][1]["status"] == "incomplete"


async def test_a_turn_that_sent_its_finish_is_not_cut() -> None:
    turn = Turn([ROLE + TEXT, sse({}, "stop"), b"data: [DONE]\n\n"])
    await turn.step(2)
    assert await turn.generation.steer()
    events = await turn.done()
    assert turn.upstream.served == 3
    assert events[-1]["type"] == "response.completed"


async def test_a_finished_turn_cannot_be_steered() -> None:
    turn = Turn([ROLE + TEXT, STOP])
    await turn.done()
    assert not await turn.generation.steer()
