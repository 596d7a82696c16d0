"""Custom and namespace tools: parsed, flattened for the fleet, restored on the way out (in the
live stream, in replays and in follow-up history)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response

from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.tools.custominput import InputStream, custom_input
from proxy.core.tools.toolnames import ToolNames, flatten_history
from proxy.core.translate.chat import to_chat_request
from tests.support.assembly import CREATED_AT, base_response
from tests.support.conformance import check_stream

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch.",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
CRM = {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [
    {"type": "function", "name": "lookup", "description": "Find a customer.",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"type": "custom", "name": "note"},
]}
TOOLS = [WEATHER, PATCH, CRM]


def request(**body: Any) -> Any:
    return parse_request({"model": "m", "input": "hi", "tools": TOOLS, **body}, counter_ids())


def chat(**body: Any) -> dict[str, Any]:
    return to_chat_request(request(**body), [])


def test_custom_and_namespace_tools_are_echoed_in_the_sdk_shape() -> None:
    echo = request().echo()
    assert [t["type"] for t in echo["tools"]] == ["function", "custom", "namespace"]
    assert echo["tools"][2]["tools"][1] == {"type": "custom", "name": "note",
                                            "description": None, "format": {"type": "text"}}
    response = {**base_response(), **echo, "status": "completed", "output": [],
                "error": None, "incomplete_details": None, "usage": None}
    Response.model_validate(response, strict=True)


def test_upstream_gets_flat_functions_only() -> None:
    tools = chat()["tools"]
    assert [t["function"]["name"] for t in tools] == ["get_weather", "apply_patch",
                                                      "crm__lookup", "crm__note"]
    patch = tools[1]["function"]
    assert patch["parameters"] == {"type": "object", "properties": {"input": {"type": "string"}},
                                   "required": ["input"], "additionalProperties": False}
    assert "start: /.+/" in patch["description"] and "Apply a patch." in patch["description"]
    assert tools[2]["function"]["description"] == "Find a customer."


def test_tool_choice_custom_and_allowed_tools() -> None:
    forced = chat(tool_choice={"type": "custom", "name": "apply_patch"})
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    allowed = chat(tool_choice={"type": "allowed_tools", "mode": "required", "tools": [
        {"type": "custom", "name": "apply_patch"}, {"type": "namespace", "name": "crm"}]})
    assert [t["function"]["name"] for t in allowed["tools"]] == ["apply_patch", "crm__lookup",
                                                                 "crm__note"]
    assert allowed["tool_choice"] == "required"
    member = chat(tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [
        {"type": "function", "name": "lookup", "namespace": "crm"}]})
    assert [t["function"]["name"] for t in member["tools"]] == ["crm__lookup"]


def test_a_choice_may_name_a_namespace_member_without_its_namespace() -> None:
    forced = request(tool_choice={"type": "custom", "name": "note"})
    assert forced.tool_choice == {"type": "custom", "name": "note", "namespace": "crm"}
    assert to_chat_request(forced, [])["tool_choice"] == {
        "type": "function", "function": {"name": "crm__note"}}
    twice = [CRM, {**CRM, "name": "erp"}]
    with pytest.raises(InvalidRequest) as info:  # ambiguous: lookup in crm or in erp?
        parse_request({"model": "m", "input": "x", "tools": twice,
                       "tool_choice": {"type": "function", "name": "lookup"}}, counter_ids())
    assert info.value.param == "tool_choice.name"


@pytest.mark.parametrize(("choice", "param"), [
    ({"type": "custom", "name": "get_weather"}, "tool_choice.name"),
    ({"type": "function", "name": "apply_patch"}, "tool_choice.name"),
    ({"type": "custom", "name": "nope"}, "tool_choice.name"),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "namespace", "name": "x"}]},
     "tool_choice.tools[0].name"),
])
def test_bad_tool_choices_name_the_parameter(choice: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        request(tool_choice=choice)
    assert info.value.param == param


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "namespace", "name": "n", "tools": []}], "tools[0].tools"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}],
     "tools[0].tools[0].type"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "custom", "name": "a"},
                                                   {"type": "function", "name": "a"}]}],
     "tools[0].tools[1].name"),
    ([{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                 "definition": "x"}}], "tools[0].format.syntax"),
    ([{"type": "custom", "name": "a b"}], "tools[0].name"),
    ([{"type": "custom", "name": "a"}, {"type": "function", "name": "a"}], "tools[1].name"),
])
def test_bad_tools_name_the_parameter(tools: list[Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request({"model": "m", "input": "x", "tools": tools}, counter_ids())
    assert info.value.param == param


def test_a_taken_flat_name_gets_a_suffix() -> None:
    tools = [{"type": "function", "name": "crm__lookup"}, CRM]
    names = ToolNames(parse_request({"model": "m", "input": "x", "tools": tools},
                                    counter_ids()).tools)
    assert names.flat("lookup", "crm") == "crm__lookup_2"
    assert names.target("crm__lookup_2").namespace == "crm"
    assert names.target("crm__lookup").namespace is None


_name = st.text(alphabet="ab_-1", min_size=1, max_size=6)


@given(top=st.lists(_name, unique=True, max_size=5),
       spaces=st.dictionaries(_name, st.lists(st.tuples(_name, st.booleans()), min_size=1,
                                              max_size=4, unique_by=lambda m: m[0]),
                              max_size=4))
def test_flat_names_are_unique_and_restore_exactly(top: list[str],
                                                   spaces: dict[str, Any]) -> None:
    tools: list[dict[str, Any]] = [{"type": "function", "name": n} for n in top]
    tools += [{"type": "namespace", "name": ns, "description": "",
               "tools": [{"type": "custom" if custom else "function", "name": n}
                         for n, custom in members]}
              for ns, members in spaces.items()]
    names = ToolNames(tools)
    flats = [names.flat(n) for n in top]
    for ns, members in spaces.items():
        for member, custom in members:
            flat = names.flat(member, ns)
            target = names.target(flat)
            assert (target.name, target.namespace, target.custom) == (member, ns, custom)
            flats.append(flat)
    for n in top:
        assert names.target(n).namespace is None and names.target(n).name == n
    assert len(set(flats)) == len(flats)


@given(st.text(max_size=40))
def test_custom_input_round_trips_through_its_wrapper(text: str) -> None:
    history = [{"id": "ctc_1", "type": "custom_tool_call", "call_id": "c1",
                "name": "apply_patch", "input": text, "status": "completed"}]
    flat = flatten_history(history, ToolNames(TOOLS))[0]
    assert flat["type"] == "function_call" and flat["name"] == "apply_patch"
    assert custom_input(flat["arguments"]) == text


def test_history_is_flattened_again() -> None:
    history = parse_request({"model": "m", "tools": TOOLS, "input": [
        {"role": "user", "content": "find bob"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "namespace": "crm",
         "arguments": "{\"q\": \"bob\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "bob: vip"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "note", "namespace": "crm",
         "input": "call bob"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "noted"},
    ]}, counter_ids())
    assert history.input[1]["namespace"] == "crm"
    messages = to_chat_request(history, [])["messages"]
    calls = messages[1]["tool_calls"]
    assert calls[0]["function"] == {"name": "crm__lookup", "arguments": "{\"q\": \"bob\"}"}
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "name": "crm__lookup",
                           "content": "bob: vip"}
    assert messages[3]["tool_calls"][0]["function"]["name"] == "crm__note"
    assert json.loads(messages[3]["tool_calls"][0]["function"]["arguments"]) == {
        "input": "call bob"}
    assert messages[4] == {"role": "tool", "tool_call_id": "c2", "name": "crm__note",
                           "content": "noted"}


# -- the way out: assembler and replay --------------------------------------------------------
def _call_chunks(name: str, arguments: list[str]) -> list[dict[str, Any]]:
    first = {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_9", "type": "function",
         "function": {"name": name, "arguments": ""}}]}}]}
    rest = [{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": a}}]}}]} for a in arguments]
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                      "total_tokens": 5}}
    return [first, *rest, end, usage]


def _assemble(name: str, arguments: list[str]) -> list[dict[str, Any]]:
    response = {**base_response(), **request().echo()}
    assembler = Assembler(response, ids=counter_ids(), clock=lambda: CREATED_AT + 1)
    events = assembler.start()
    for chunk in _call_chunks(name, arguments):
        events += assembler.feed(chunk)
    events += assembler.end()
    check_stream(events)
    return events


def test_a_namespaced_call_comes_back_under_its_own_name() -> None:
    events = _assemble("crm__lookup", ['{"q": ', '"bob"}'])
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["name"] == "lookup" and added["item"]["namespace"] == "crm"
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "lookup"
    item = events[-1]["response"]["output"][0]
    assert item == {"id": "fc_1", "type": "function_call", "status": "completed",
                    "arguments": '{"q": "bob"}', "call_id": "call_9", "name": "lookup",
                    "namespace": "crm"}


def test_a_custom_call_comes_back_as_custom_tool_call_with_its_input() -> None:
    patch = "*** Begin Patch\n+hello \"world\"\n*** End Patch"
    wrapped = json.dumps({"input": patch})
    events = _assemble("apply_patch", [wrapped[:10], wrapped[10:]])
    types = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in types
    delta = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert [d["delta"] for d in delta] == [patch] and done[0]["input"] == patch
    item = events[-1]["response"]["output"][0]
    assert item == {"id": "fc_1", "type": "custom_tool_call", "status": "completed",
                    "call_id": "call_9", "input": patch, "name": "apply_patch"}
    assert events[-1]["type"] == "response.completed"


def test_a_namespaced_custom_call_and_its_replay() -> None:
    events = _assemble("crm__note", ['{"input": "call bob"}'])
    final = events[-1]["response"]
    assert final["output"][0]["namespace"] == "crm"
    assert final["output"][0]["input"] == "call bob"
    replayed = events_from_response(final)
    check_stream(replayed)
    assert [e["type"] for e in replayed] == [e["type"] for e in events]
    assert replayed[-1]["response"] == final


def test_a_custom_call_cut_midway_restores_and_fails_cleanly() -> None:
    response = {**base_response(), **request().echo()}
    live = Assembler(response, ids=counter_ids(), clock=lambda: CREATED_AT)
    events = live.start()
    for chunk in _call_chunks("apply_patch", ['{"input": "par'])[:2]:
        events += live.feed(chunk)
    assert [e["delta"] for e in events if e["type"].endswith("input.delta")] == ["par"]
    resumed = Assembler(response, ids=counter_ids(), clock=lambda: CREATED_AT)
    resumed.restore(events)
    tail = resumed.fail("worker lost")
    check_stream(events + tail)
    assert tail[-1]["response"]["output"][0]["type"] == "custom_tool_call"
    assert tail[-1]["response"]["output"][0]["input"] == "par"


def test_a_custom_input_streams_as_it_arrives() -> None:
    events = _assemble("apply_patch", ['{"input"', ': "line 1\\n', 'line 2\\u00e9', '"}'])
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert deltas == ["line 1\n", "line 2é"]
    assert events[-1]["response"]["output"][0]["input"] == "line 1\nline 2é"


@pytest.mark.parametrize(("fragments", "expected"), [
    (["*** Begin Patch", "\n*** End Patch"], "*** Begin Patch\n*** End Patch"),  # bare text
    (['{"path": "a", "input": "x"}'], "x"),  # another shape: found at the end
    (['{"input": ""}'], ""),
    (['{"input": "cut off'], "cut off"),  # a length-truncated call keeps what came
])
def test_custom_inputs_of_other_shapes_come_whole_at_the_end(fragments: list[str],
                                                             expected: str) -> None:
    events = _assemble("apply_patch", fragments)
    assert events[-1]["response"]["output"][0]["input"] == expected


@given(text=st.text(max_size=30), ascii_only=st.booleans(), spaced=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_streamed_pieces_join_to_the_exact_input(text: str, ascii_only: bool, spaced: bool,
                                                 cuts: list[int]) -> None:
    arguments = json.dumps({"input": text}, ensure_ascii=ascii_only,
                           separators=(", ", ": ") if spaced else (",", ":"))
    bounds = sorted({0, len(arguments), *(c for c in cuts if c < len(arguments))})
    stream = InputStream()
    pieces = [stream.feed(arguments[a:b]) for a, b in itertools.pairwise(bounds)]
    whole, rest = stream.finish(arguments)
    expected = custom_input(arguments)
    assert "".join(pieces) + rest == whole == expected
    assert rest == ""


def test_a_lone_surrogate_never_reaches_an_event() -> None:
    stream = InputStream()
    text = stream.feed('{"input": "a\\ud83d b"}')
    assert text == "a\ufffd b" and custom_input('{"input": "\\udc00"}') == "\ufffd"
    text.encode()
