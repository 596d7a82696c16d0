"""`item_reference` inputs: parsed into placeholders, resolved from stored items in place, an
unknown id refused naming `input[i].id` (core/request/references.py)."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.items import parse_input
from proxy.core.request.references import referenced_ids, resolve

STORED = {
    "msg_a": {"id": "msg_a", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "earlier", "annotations": []}]},
    "rs_a": {"id": "rs_a", "type": "reasoning", "summary": [],
             "content": [{"type": "reasoning_text", "text": "hmm"}], "status": "completed"},
}


def vercel_input() -> list[dict[str, object]]:
    return [{"role": "user", "content": [{"type": "input_text", "text": "q1"}]},
            {"type": "item_reference", "id": "rs_a"},
            {"type": "item_reference", "id": "msg_a"},
            {"role": "user", "content": [{"type": "input_text", "text": "q2"}]}]


def test_a_request_keeps_placeholders_in_place() -> None:
    request = parse_request({"model": "m", "input": vercel_input()}, counter_ids())
    assert [i["type"] for i in request.input] == ["message", "item_reference",
                                                  "item_reference", "message"]
    assert referenced_ids(request.input) == ["rs_a", "msg_a"]


def test_resolve_puts_each_stored_item_in_its_place() -> None:
    request = parse_request({"model": "m", "input": vercel_input()}, counter_ids())
    resolved = resolve(request.input, STORED)
    assert resolved[1:3] == [STORED["rs_a"], STORED["msg_a"]]
    assert resolved[0] is request.input[0] and resolved[3] is request.input[3]
    assert resolved[1] is not STORED["rs_a"]  # a copy: the caller's stored item stays as it is


def test_an_unknown_id_is_a_400_naming_its_position() -> None:
    request = parse_request({"model": "m", "input": vercel_input()}, counter_ids())
    with pytest.raises(InvalidRequest) as caught:
        resolve(request.input, {"rs_a": STORED["rs_a"]})
    assert caught.value.param == "input[2].id"
    assert "msg_a" in caught.value.message


@pytest.mark.parametrize(("item", "param"), [
    ({"type": "item_reference"}, "input[0].id"),
    ({"type": "item_reference", "id": ""}, "input[0].id"),
    ({"type": "item_reference", "id": 7}, "input[0].id"),
])
def test_a_malformed_reference_is_a_400(item: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"model": "m", "input": [item]}, counter_ids())
    assert caught.value.param == param


def test_references_are_only_placeholders_where_a_request_is_parsed() -> None:
    # conversation items and other item lists keep refusing them: nothing would resolve them
    with pytest.raises(InvalidRequest) as caught:
        parse_input([{"type": "item_reference", "id": "msg_a"}], counter_ids(), max_items=5)
    assert caught.value.param == "input[0].type"
