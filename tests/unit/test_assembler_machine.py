"""The assembler's phase changes only along its table (core/events/assembler/machine.py)."""

from __future__ import annotations

import pytest

from proxy.core.events.assembler import Assembler, Phase, PhaseError
from proxy.core.events.assembler.machine import NEXT
from proxy.core.ids import counter_ids
from tests.support.assembly import CREATED_AT, base_response


def test_every_phase_has_a_row_and_done_is_final() -> None:
    assert set(NEXT) == set(Phase)
    assert NEXT[Phase.DONE] == frozenset()


def test_a_change_off_the_table_is_an_internal_error() -> None:
    a = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    a.start()
    a.cancel()
    assert a.phase is Phase.DONE
    with pytest.raises(PhaseError):
        a._to(Phase.READY)
    assert a.phase is Phase.DONE


def test_an_mcp_call_waits_in_tool_without_an_exception() -> None:
    a = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    a.start()
    a.offer_mcp({"calc__add": ("calc", "add", False)})
    call = {"index": 0, "id": "c1", "function": {"name": "calc__add", "arguments": "{}"}}
    a.feed({"choices": [{"delta": {"tool_calls": [call]}}]})
    # The text after the call closes it: it waits, and the rest of the chunk is not read.
    events = a.feed({"choices": [{"delta": {"content": "more"}, "finish_reason": "stop"}]})
    assert [e["type"] for e in events] == ["response.mcp_call_arguments.done"]
    assert a.phase is Phase.TOOL and not a.turn_finished
    assert a.feed({"choices": [{"delta": {"content": "later"}}]}) == []
    assert a.waiting is not None and a.waiting["arguments"] == "{}"
