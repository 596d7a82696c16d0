"""services/responses/steering.py: one connection's steering, from a steer's answer to what its
input becomes when the response ends (a successor, a pending continuation, or a failure), with
real assemblers and turns (no upstream: the tests end the responses themselves)."""

from __future__ import annotations

import itertools
from typing import Any

from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from proxy.core.events import steer as st
from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from proxy.services.generation.run import Generation
from proxy.services.process.loops import TaskSet
from proxy.services.responses.steering import KEPT, MAX_PENDING, Run, Steering
from tests.support.assembly import CREATED_AT, base_response

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)
_ids = itertools.count(1)
TEXT = {"choices": [{"index": 0, "delta": {"content": "Once upon"}}]}
STOP = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
CALL = {"choices": [{"index": 0, "delta": {"tool_calls": [
    {"index": 0, "id": "call_9", "function": {"name": "get_weather",
                                              "arguments": '{"city": "Oslo"}'}}]}}]}
CALLED = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
BODY = {"model": "sim-model", "input": "tell me a story", "instructions": "be brief",
        "tools": [{"type": "function", "name": "get_weather"}]}


def steering() -> Steering:
    return Steering(max_items=100, ids=counter_ids())


def started(steers: Steering, body: dict[str, Any] | None = None) -> Run:
    """A client's create whose response is streaming."""
    run = steers.begin(dict(body or BODY))
    response_id = f"resp_{next(_ids)}"
    assembler = Assembler({**base_response(), "id": response_id}, ids=counter_ids(),
                          clock=lambda: CREATED_AT)
    assembler.start()
    run.attach(response_id, Generation(None, assembler, TaskSet()))
    return run


def assembler_of(run: Run) -> Assembler:
    assert run.turn is not None
    return run.turn.assembler


def answer(run: Run, *chunks: dict[str, Any]) -> None:
    """The response's upstream turn: `chunks`, then its end."""
    assembler = assembler_of(run)
    for chunk in chunks:
        assembler.feed(chunk)
    assembler.end()


async def steer(steers: Steering, target: str | None, text: Any = "turn left",
                **extra: Any) -> list[dict[str, Any]]:
    events, _ = await steers.steer({"previous_response_id": target, "input": text, **extra})
    for event in events:
        SERVER_EVENT.validate_python(event, strict=True)
    return events


def codes(events: list[dict[str, Any]]) -> list[str]:
    return [e["error"]["code"] if e["type"] == st.FAILED else e["type"] for e in events]


async def test_a_steer_on_a_running_response_is_accepted_and_its_turn_asked_to_stop() -> None:
    steers = steering()
    run = started(steers)
    events, turn = await steers.steer({"previous_response_id": run.response_id,
                                       "input": "turn left"})
    assert codes(events) == [st.ACCEPTED]
    assert events[0]["steer"] == {"id": "steer_1", "previous_response_id": run.response_id}
    assert turn is run.turn
    assert await turn.steer()  # no upstream read open: it ends at its next boundary


async def test_unknown_and_invalid_steers_fail_before_an_id_is_given() -> None:
    steers = steering()
    started(steers)
    for events, code in [(await steer(steers, "resp_elsewhere"), st.NOT_FOUND),
                         (await steer(steers, None), st.INVALID),
                         (await steer(steers, "resp_x", [{"type": "function_call_output",
                                                          "call_id": "c", "output": "x"}]),
                          st.INVALID)]:
        assert codes(events) == [code]
        assert "id" not in events[0]["steer"]


async def test_an_invalid_steer_of_a_known_response_answers_on_its_lane() -> None:
    steers = steering()
    run = started(steers, {**BODY, "stream_id": "lane-3"})
    events = await steer(steers, run.response_id, "x", stream_id="lane-3")
    assert codes(events) == [st.INVALID]
    assert events[0]["stream_id"] == "lane-3"
    assert run.queue == []


async def test_conversation_bound_and_compacting_responses_are_not_steered() -> None:
    steers = steering()
    for extra in ({"conversation": "conv_1"},
                  {"context_management": [{"type": "compaction"}]}):
        run = started(steers, {**BODY, **extra})
        assert codes(await steer(steers, run.response_id)) == [st.NOT_SUPPORTED]
        assert run.queue == []


async def test_at_most_eight_steers_wait_on_one_response() -> None:
    steers = steering()
    run = started(steers)
    for n in range(MAX_PENDING):
        assert codes(await steer(steers, run.response_id, f"steer {n}")) == [st.ACCEPTED]
    events = await steer(steers, run.response_id, "one more")
    assert codes(events) == [st.TOO_MANY]
    assert events[0]["steer"]["input"] == "one more"  # the input comes back
    assert len(run.queue) == MAX_PENDING


async def test_the_successor_continues_with_the_queued_input_in_order_and_same_settings(
        ) -> None:
    steers = steering()
    run = started(steers, {**BODY, "stream_id": "lane-7"})
    await steer(steers, run.response_id, "first")
    await steer(steers, run.response_id, [{"role": "user", "content": "second"}])
    assembler = assembler_of(run)
    assembler.feed(TEXT)
    assembler.steered()
    assert run.successor_follows()
    settled = steers.end(run)
    assert settled.events == []
    successor = settled.successor
    assert successor is not None and successor.automatic
    assert successor.body == {**BODY, "stream_id": "lane-7",
                              "previous_response_id": run.response_id,
                              "input": [{"type": "message", "role": "user", "content": "first"},
                                        {"type": "message", "role": "user",
                                         "content": "second"}]}
    assert [q.id for q in successor.inherited] == ["steer_1", "steer_2"]
    assert successor.stream_id == "lane-7"


async def test_steers_after_the_end_are_told_why() -> None:
    steers = steering()
    done = started(steers)
    answer(done, TEXT, STOP)
    failed = started(steers)
    assembler_of(failed).fail("upstream error")
    # Ended but not yet settled (its terminal event made): refused already.
    assert codes(await steer(steers, done.response_id)) == [st.ALREADY_COMPLETED]
    assert codes(await steer(steers, failed.response_id)) == [st.NOT_ACTIVE]
    steers.end(done)
    steers.end(failed)
    assert codes(await steer(steers, done.response_id)) == [st.ALREADY_COMPLETED]
    assert codes(await steer(steers, failed.response_id)) == [st.NOT_ACTIVE]


async def test_a_response_waiting_for_tool_outputs_leaves_its_steers_pending() -> None:
    steers = steering()
    run = started(steers, {**BODY, "stream_id": "lane-2"})
    await steer(steers, run.response_id, "also check Bergen")
    answer(run, CALL, CALLED)
    assert not run.successor_follows()
    settled = steers.end(run)
    assert settled.successor is None
    assert codes(settled.events) == [st.PENDING]
    pending = settled.events[0]
    assert pending["required_input"] == [{"type": "function_call_output", "call_id": "call_9",
                                          "name": "get_weather"}]
    assert pending["steer"]["id"] == "steer_1" and pending["stream_id"] == "lane-2"
    SERVER_EVENT.validate_python(pending, strict=True)
    # A steer while the client runs its tools: queued there too, pending at once.
    later = await steer(steers, run.response_id, "and Tromsø")
    assert codes(later) == [st.ACCEPTED, st.PENDING]
    # The client's continuation gets the queued input first, in order; then the parent is done.
    output = {"type": "function_call_output", "call_id": "call_9", "output": "rain"}
    continuation = steers.begin({**BODY, "previous_response_id": run.response_id,
                                 "input": [output], "stream_id": "lane-2"})
    assert continuation.body["input"] == [
        {"type": "message", "role": "user", "content": "also check Bergen"},
        {"type": "message", "role": "user", "content": "and Tromsø"}, output]
    assert [q.id for q in continuation.inherited] == ["steer_1", "steer_2"]
    assert not continuation.automatic
    assert codes(await steer(steers, run.response_id)) == [st.ALREADY_COMPLETED]


async def test_a_completed_response_without_waiting_input_takes_no_late_steer() -> None:
    steers = steering()
    run = started(steers)
    answer(run, TEXT, STOP)
    steers.end(run)
    assert steers.begin({**BODY, "previous_response_id": run.response_id}).inherited == []


async def test_input_of_a_successor_that_could_not_be_created_comes_back_with_its_ids(
        ) -> None:
    steers = steering()
    run = started(steers)
    await steer(steers, run.response_id, "first")
    await steer(steers, run.response_id, "second")
    assembler_of(run).steered()
    successor = steers.end(run).successor
    assert successor is not None
    successor.fail("upstream refused the request")
    events = steers.end(successor).events
    assert codes(events) == [st.SUCCESSOR_FAILED, st.SUCCESSOR_FAILED]
    assert [(e["steer"]["id"], e["steer"]["input"]) for e in events] == [
        ("steer_1", "first"), ("steer_2", "second")]
    assert all(e["steer"]["previous_response_id"] == run.response_id for e in events)
    assert "upstream refused the request" in events[0]["error"]["message"]


async def test_input_queued_on_a_response_that_failed_comes_back() -> None:
    steers = steering()
    run = started(steers)
    await steer(steers, run.response_id, "first")
    assembler_of(run).fail("upstream error")
    settled = steers.end(run)
    assert settled.successor is None
    assert codes(settled.events) == [st.SUCCESSOR_FAILED]
    assert settled.events[0]["steer"]["id"] == "steer_1"


async def test_pending_input_of_a_response_pushed_out_of_memory_comes_back() -> None:
    steers = steering()
    waiting = started(steers)
    await steer(steers, waiting.response_id)
    answer(waiting, CALL, CALLED)
    steers.end(waiting)
    events: list[dict[str, Any]] = []
    for _ in range(KEPT):
        other = started(steers)
        answer(other, TEXT, STOP)
        events += steers.end(other).events
    assert codes(events) == [st.NOT_ACTIVE]
    assert events[0]["steer"]["id"] == "steer_1"


async def test_steer_events_are_numbered_per_lane() -> None:
    steers = steering()
    plain, laned = started(steers), started(steers, {**BODY, "stream_id": "b"})
    numbers = [(e.get("stream_id"), e["sequence_number"])
               for target in (plain, laned, plain, laned)
               for e in await steer(steers, target.response_id)]
    assert numbers == [(None, 0), ("b", 0), (None, 1), ("b", 1)]
