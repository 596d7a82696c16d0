"""The Response object as docs/contract.md says (Open Responses): `completed_at` present in every
snapshot (null until completed), effective sampling values as numbers, live and replayed."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.events.assembler import Assembler
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from tests.support.assembly import CREATED_AT, assemble, golden_bytes
from tests.support.conformance import check_stream


def base() -> dict[str, Any]:
    request = parse_request({"model": "sim-model", "input": "hi"}, counter_ids())
    return {"id": "resp_1", "object": "response", "created_at": CREATED_AT,
            "model": "sim-model", **request.echo()}


def _objects(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["response"] for e in events if "response" in e]


def test_completed_at_is_null_until_completed_then_a_number() -> None:
    assembler = Assembler(base(), ids=counter_ids(), clock=lambda: CREATED_AT + 5)
    events = assembler.start() + assembler.feed(
        {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]})
    events += assembler.end()
    check_stream(events)
    objects = _objects(events)
    assert [o["completed_at"] for o in objects] == [None, None, CREATED_AT + 5]
    for obj in objects:
        assert obj["temperature"] == 1.0 and obj["top_p"] == 1.0
        assert obj["presence_penalty"] == 0.0 and obj["frequency_penalty"] == 0.0
        assert obj["top_logprobs"] == 0


@pytest.mark.parametrize("end", ["fail", "cancel", "incomplete"])
def test_completed_at_is_null_on_responses_that_did_not_complete(end: str) -> None:
    assembler = Assembler(base(), ids=counter_ids(), clock=lambda: CREATED_AT + 5)
    events = assembler.start()
    if end == "incomplete":
        events += assembler.feed({"choices": [{"index": 0, "delta": {"content": "h"},
                                               "finish_reason": "length"}]})
        events += assembler.end()
    else:
        events += assembler.cancel() if end == "cancel" else assembler.fail("boom")
    final = events[-1]["response"]
    assert "completed_at" in final and final["completed_at"] is None
    replayed = events_from_response(final)
    assert all(o["completed_at"] is None for o in _objects(replayed))


def test_replay_keeps_completed_at_null_until_the_end() -> None:
    final = assemble(golden_bytes("text"))[-1]["response"]
    final = {**final, "completed_at": CREATED_AT + 9}
    objects = _objects(events_from_response(final))
    assert [o["completed_at"] for o in objects] == [None, None, CREATED_AT + 9]
