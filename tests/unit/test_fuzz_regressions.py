"""Bugs the fuzzer (make fuzz, tests/fuzz/) found, each kept as the smallest request that
showed it: every one was a 500 (an exception past the parser) and is now a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.jsonbody import parse_object

BASE: dict[str, Any] = {"model": "m", "input": "hi"}


@pytest.mark.parametrize(("extra", "param"), [
    # `type` of an unhashable JSON type was looked up in a frozenset: TypeError.
    ({"tools": [{"type": {}, "name": "f"}]}, "tools[0].type"),
    ({"tools": [{"type": ["web_search"]}]}, "tools[0].type"),
    ({"tool_choice": {"type": {"a": 1}}}, "tool_choice.type"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "auto",
                      "tools": [{"type": {}, "name": "get_weather"}]}},
     "tool_choice.tools[0].type"),
])
def test_a_type_of_the_wrong_json_type_is_a_400(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_request({**BASE, **extra}, counter_ids())
    assert refused.value.param == param


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(("extra", "param"), [
    # Parsed (orjson reads 1024 levels) but orjson *writes* only 254: the upstream body (or the
    # stored object) then raised TypeError "Recursion limit reached", a 500.
    ({"tools": [{"type": "function", "name": "f", "parameters": _deep(300)}]}, "tools"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": _deep(300)}}}, "text"),
])
def test_a_body_nested_past_what_orjson_can_write_is_a_400(extra: dict[str, Any],
                                                           param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_object(json.dumps({**BASE, **extra}).encode())  # orjson cannot write it
    assert refused.value.param == param
    assert refused.value.code == "nesting_too_deep"
