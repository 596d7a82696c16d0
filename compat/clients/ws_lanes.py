"""The `openai` Python SDK's own WebSocket client (`client.responses.connect()`) on lanes and
steering: two responses on two lanes of one connection, then a steer of a running response.

Every event is parsed by the SDK into its own types (a frame it cannot parse fails the check).
The simulator directive `[[sim tokens=N delay_ms=D]]` makes an answer long and slow enough that
the lanes overlap and the steer lands mid-text."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
from checks import API_KEY, BASE_URL, MODEL, check, expect, finish

SLOW = "tell me a long story [[sim tokens=200 delay_ms=20]]"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
TIMEOUT = 60.0


async def two_lanes() -> list[Any]:
    client = openai.AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0)
    events: list[Any] = []
    ended: set[str] = set()
    async with client, client.responses.connect(max_retries=0) as connection:
        await connection.response.create(model=MODEL, input=SLOW, stream_id="lane-a")
        await connection.response.create(model=MODEL, input="hello lanes", stream_id="lane-b")
        async for event in connection:
            events.append(event)
            if event.type in TERMINAL:
                ended.add(event.stream_id)
                if ended == {"lane-a", "lane-b"}:
                    break
    return events


async def steered() -> list[Any]:
    client = openai.AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0)
    events: list[Any] = []
    sent = False
    async with client, client.responses.connect(max_retries=0) as connection:
        await connection.response.create(model=MODEL, input=SLOW, stream_id="steer-lane")
        async for event in connection:
            events.append(event)
            if event.type == "response.output_text.delta" and not sent:
                sent = True
                await connection.response.steer(input="wrap it up",
                                                previous_response_id=events[0].response.id)
            if event.type in TERMINAL and event.response.id != events[0].response.id:
                break
    return events


@check("two lanes on one WebSocket connection")
def _lanes() -> None:
    events = asyncio.run(asyncio.wait_for(two_lanes(), TIMEOUT))
    by_lane: dict[str, list[Any]] = {}
    for event in events:
        by_lane.setdefault(event.stream_id, []).append(event)
    expect(set(by_lane) == {"lane-a", "lane-b"}, f"lanes seen: {sorted(by_lane)}")
    for lane, seen in by_lane.items():
        numbers = [e.sequence_number for e in seen]
        expect(numbers == list(range(len(numbers))), f"{lane}: sequence numbers {numbers[:8]}")
        expect(seen[-1].type == "response.completed", f"{lane} ended with {seen[-1].type}")
    # The short answer on lane b ends while lane a still streams: the lanes ran side by side.
    order = [e.stream_id for e in events if e.type in TERMINAL]
    expect(order == ["lane-b", "lane-a"], f"terminal events in order {order}")


@check("a steer mid-text ends the response and a successor continues it")
def _steer() -> None:
    events = asyncio.run(asyncio.wait_for(steered(), TIMEOUT))
    kinds = [e.type for e in events]
    expect("response.steer.accepted" in kinds, f"no steer.accepted among {set(kinds)}")
    first = events[0].response.id
    ended = [e for e in events if e.type in TERMINAL]
    expect(len(ended) == 2, f"{len(ended)} responses ended")
    expect(ended[0].type == "response.incomplete"
           and ended[0].response.incomplete_details is not None
           and ended[0].response.incomplete_details.reason == "steered",
           f"the steered response ended {ended[0].type}")
    expect(ended[1].response.previous_response_id == first,
           "the successor does not continue the steered response")
    expect({e.stream_id for e in events} == {"steer-lane"}, "an event left its lane")


finish()
