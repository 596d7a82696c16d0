"""A final Response object rebuilds into a complete, valid event sequence."""

from __future__ import annotations

import pytest

from proxy.core.events.replay import events_from_response
from tests.support.assembly import assemble, golden_bytes
from tests.support.conformance import check_stream
from tests.unit.test_assembler_golden import CASES


@pytest.mark.parametrize("name", CASES)
def test_replay_of_a_final_object_is_a_valid_stream(name: str) -> None:
    live = assemble(golden_bytes(name), connection_lost=(name == "cut"))
    final = live[-1]["response"]
    replayed = events_from_response(final)
    check_stream(replayed)
    assert replayed[-1] == {**live[-1], "sequence_number": len(replayed) - 1}
    done = [e["item"] for e in replayed if e["type"] == "response.output_item.done"]
    assert done == final["output"]
    assert events_from_response(final) == replayed  # deterministic


def test_background_replay_starts_queued() -> None:
    final = assemble(golden_bytes("text"))[-1]["response"]
    replayed = events_from_response({**final, "background": True})
    assert [e["type"] for e in replayed[:3]] == [
        "response.created", "response.queued", "response.in_progress"]
    assert replayed[0]["response"]["status"] == "queued"
    check_stream(replayed)


def test_cancelled_replay_ends_cancelled() -> None:
    final = assemble(golden_bytes("text"))[-1]["response"]
    replayed = events_from_response({**final, "status": "cancelled", "background": True})
    assert replayed[-1]["type"] == "response.cancelled"
    check_stream(replayed)


def test_running_response_cannot_be_rebuilt() -> None:
    with pytest.raises(ValueError, match="in_progress"):
        events_from_response({"status": "in_progress", "output": []})
