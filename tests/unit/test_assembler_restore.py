"""A response picked up from any prefix of its event log (its worker died) and closed there is
still one valid stream: items closed, numbering continued, one terminal event."""

from __future__ import annotations

import pytest

from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from tests.support.assembly import CREATED_AT, assemble, base_response, golden_bytes
from tests.support.conformance import check_stream

CASES = ["text", "reasoning_then_text", "tool_call", "two_tool_calls"]


def pick_up(prefix: list[dict[str, object]]) -> Assembler:
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.restore(prefix)
    return assembler


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("ending", ["fail", "cancel"])
def test_every_prefix_closes_into_a_valid_stream(name: str, ending: str) -> None:
    live = assemble(golden_bytes(name))
    for cut in range(2, len(live)):  # at least created + in_progress were logged
        prefix = live[:cut]
        assembler = pick_up(prefix)
        closing = (assembler.fail("the worker running this response stopped")
                   if ending == "fail" else assembler.cancel())
        stream = prefix + closing
        check_stream(stream)
        final = stream[-1]["response"]
        assert final["status"] == ("failed" if ending == "fail" else "cancelled")
        done_before = [e["item"] for e in prefix if e["type"] == "response.output_item.done"]
        assert final["output"][:len(done_before)] == done_before


def test_the_open_text_so_far_is_kept() -> None:
    live = assemble(golden_bytes("text"))
    deltas = [i for i, e in enumerate(live) if e["type"] == "response.output_text.delta"]
    prefix = live[:deltas[2] + 1]
    closing = pick_up(prefix).fail("lost")
    text = "".join(e["delta"] for e in prefix if e["type"] == "response.output_text.delta")
    assert closing[-1]["response"]["output"][0]["content"][0]["text"] == text
    assert closing[-1]["response"]["output"][0]["status"] == "incomplete"
