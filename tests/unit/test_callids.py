"""An output answers a call seen before it: in the history, earlier in the input (an
`item_reference` resolved to a call counts), or hidden behind a compaction item."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request.callids import check_call_ids

CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
CUSTOM = {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"}


def output(call_id: str, kind: str = "function_call_output") -> dict[str, str]:
    return {"type": kind, "call_id": call_id, "output": "ok"}


def test_outputs_of_calls_in_the_history_or_earlier_in_the_input_pass() -> None:
    check_call_ids([CALL], [output("c1")])
    check_call_ids([], [CUSTOM, output("c2", "custom_tool_call_output"), output("c2")])
    check_call_ids([CALL, {"type": "compaction", "encrypted_content": "e"}], [output("zz")])


@pytest.mark.parametrize(("history", "items", "param"), [
    ([], [output("c1")], "input[0].call_id"),
    ([CALL], [{"role": "user", "content": "q"}, output("c9")], "input[1].call_id"),
    ([], [output("c2", "custom_tool_call_output"), CUSTOM], "input[0].call_id"),  # too early
])
def test_an_output_of_no_call_is_a_400_naming_its_call_id(
        history: list[dict[str, str]], items: list[dict[str, str]], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_call_ids(history, items)
    assert info.value.param == param
