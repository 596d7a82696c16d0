"""Request parsing: every served field read and checked, every bad one a 400 naming it."""

from __future__ import annotations

import cProfile
import pstats
from dataclasses import fields
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.create import ResponsesRequest, parse_request
from proxy.core.request.tolerance import Tolerance

STRICT = Tolerance(strict_params=True, reject_hosted=True)


def parse(**body: Any) -> Any:
    return parse_request({"model": "m", "input": "hi", **body}, counter_ids())


def refused(body: dict[str, Any], param: str, fragment: str = "", *,
            tolerance: Tolerance | None = None) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_request(body, counter_ids(), max_input_items=8, tolerance=tolerance)
    assert info.value.status == 400
    assert info.value.param == param, info.value.message
    assert fragment in info.value.message
    return info.value


def test_defaults_are_openai_defaults() -> None:
    request = parse()
    assert request.store is True and request.stream is False and request.background is False
    assert request.tool_choice == "auto" and request.parallel_tool_calls is True
    assert request.text == {"format": {"type": "text"}}
    assert request.input == [{"id": "msg_1", "type": "message", "role": "user",
                              "status": "completed",
                              "content": [{"type": "input_text", "text": "hi"}]}]


def test_echo_carries_every_field_the_sdks_expect() -> None:
    echo = parse(metadata={"a": "b"}, temperature=0.5, conversation={"id": "conv_1"}).echo()
    for key in ("instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
                "reasoning", "temperature", "top_p", "max_output_tokens", "metadata", "user",
                "store", "background", "previous_response_id", "conversation", "truncation",
                "top_logprobs", "service_tier", "max_tool_calls"):
        assert key in echo
    assert echo["metadata"] == {"a": "b"} and echo["temperature"] == 0.5
    assert echo["conversation"] == {"id": "conv_1"}
    assert echo["reasoning"] == {"effort": None, "summary": None}


def test_nulls_read_as_absent() -> None:
    request = parse(temperature=None, tools=None, store=None, stream=None, metadata=None)
    assert request.store is True and request.tools == [] and request.metadata == {}


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x"}, "model"),
    ({"model": 5, "input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": 5}, "input"),
    ({"model": "m", "input": "x", "temperature": 3}, "temperature"),
    ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
    ({"model": "m", "input": "x", "top_p": 1.5}, "top_p"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
    ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "x", "metadata": {"k": 1}}, "metadata.k"),
    ({"model": "m", "input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"model": "m", "input": "x", "instructions": ["a"]}, "instructions"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}},
     "text.format.name"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}},
     "text.format.schema"),
    ({"model": "m", "input": "x", "reasoning": {"effort": "maximal"}}, "reasoning.effort"),
    ({"model": "m", "input": "x", "include": ["web_search_call.action.sources"]}, "include[0]"),
    ({"model": "m", "input": "x", "truncation": "middle"}, "truncation"),
    ({"model": "m", "input": "x", "top_logprobs": 21}, "top_logprobs"),
    ({"model": "m", "input": "x", "top_logprobs": "3"}, "top_logprobs"),
    ({"model": "m", "input": "x", "stream_options": {"include_obfuscation": False}},
     "stream_options"),
    ({"model": "m", "input": "x", "conversation": {"name": "c"}}, "conversation.id"),
])
def test_bad_fields_name_the_parameter(body: dict[str, Any], param: str) -> None:
    refused(body, param)


def test_strict_refuses_unknown_parameters_by_name() -> None:
    refused({"model": "m", "input": "x", "colour": "red"}, "colour", "Unknown parameter: 'colour'.",
            tolerance=STRICT)


def test_lenient_ignores_unknown_parameters_and_names_them() -> None:
    request = parse(colour="red", shade={"x": 1}, nothing=None)
    assert request.ignored_params == ("colour", "shade")
    assert "colour" not in request.echo()
    assert parse().ignored_params == ()


@pytest.mark.parametrize("tolerance", [None, STRICT])
def test_unsupported_features_are_refused_in_both_modes(tolerance: Tolerance | None) -> None:
    refused({"model": "m", "input": "x", "moderation": {}}, "moderation", "not supported",
            tolerance=tolerance)


def test_codex_hint_fields_are_accepted_in_strict_mode() -> None:
    body = {"model": "m", "input": "x", "stream": True,
            "client_metadata": {"x-codex-installation-id": "abc"},
            "prompt_cache_key": "thread-1", "prompt_cache_retention": "24h",
            "prompt_cache_options": {"mode": "explicit", "ttl": "12h"},
            "safety_identifier": "u1", "service_tier": "priority",
            "text": {"verbosity": "low"}, "stream_options": {"include_obfuscation": False},
            "max_tool_calls": 4}
    request = parse_request(body, counter_ids(), tolerance=STRICT)
    echo = request.echo()
    assert request.ignored_params == ()
    assert echo["prompt_cache_options"] == {"mode": "explicit", "ttl": "12h"}
    assert echo["prompt_cache_key"] == "thread-1" and echo["max_tool_calls"] == 4
    assert echo["text"]["verbosity"] == "low" and "client_metadata" not in echo
    refused({**body, "client_metadata": "x"}, "client_metadata")
    refused({**body, "prompt_cache_options": {"ttl": "1h"}}, "prompt_cache_options.ttl")


def test_background_needs_store() -> None:
    refused({"model": "m", "input": "x", "background": True, "store": False}, "background")


def test_conversation_and_previous_response_id_exclude_each_other() -> None:
    refused({"model": "m", "input": "x", "conversation": "conv_1",
             "previous_response_id": "resp_1"}, "conversation")


HOSTED = ["web_search", "web_search_preview", "file_search", "code_interpreter",
          "computer_use_preview", "image_generation", "local_shell", "shell", "apply_patch"]


@pytest.mark.parametrize("kind", HOSTED)
def test_hosted_tools_are_refused_by_name_when_rejecting(kind: str) -> None:
    error = refused({"model": "m", "input": "x", "tools": [
        {"type": "function", "name": "f"}, {"type": kind}]}, "tools[1].type", tolerance=STRICT)
    assert kind in error.message


@pytest.mark.parametrize("kind", HOSTED)
def test_hosted_tools_are_dropped_and_named_by_default(kind: str) -> None:
    request = parse(tools=[{"type": "function", "name": "f"}, {"type": kind}])
    assert request.dropped_tools == (kind,)
    assert [t["name"] for t in request.tools] == ["f"]


def test_a_tool_choice_forcing_a_dropped_tool_is_refused() -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "web_search"}]
    refused({"model": "m", "input": "x", "tools": tools, "tool_choice": {"type": "web_search"}},
            "tool_choice.type", "hosted")
    refused({"model": "m", "input": "x", "tools": [{"type": "web_search"}],
             "tool_choice": "required"}, "tool_choice")
    refused({"model": "m", "input": "x", "tools": tools,
             "tool_choice": {"type": "allowed_tools", "mode": "required",
                             "tools": [{"type": "web_search"}]}}, "tool_choice")


@pytest.mark.parametrize("kind", ["mcp", "programmatic_tool_calling", "nonsense"])
def test_other_tool_types_are_refused_by_name(kind: str) -> None:
    error = refused({"model": "m", "input": "x", "tools": [
        {"type": "function", "name": "f"}, {"type": kind}]}, "tools[1].type")
    assert kind in error.message


def test_function_tools_are_checked() -> None:
    refused({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name")
    refused({"model": "m", "input": "x", "tools": [{"type": "function", "name": "a b"}]},
            "tools[0].name")
    refused({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"},
                                                   {"type": "function", "name": "f"}]},
            "tools[1].name", "Duplicate")
    refused({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f",
                                                    "parameters": []}]},
            "tools[0].parameters")


def test_tool_choice_forms() -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]
    assert parse(tools=tools, tool_choice="required").tool_choice == "required"
    assert parse(tools=tools, tool_choice={"type": "function", "name": "g"}).tool_choice == {
        "type": "function", "name": "g"}
    allowed = parse(tools=tools, tool_choice={"type": "allowed_tools", "mode": "auto",
                                              "tools": [{"type": "function", "name": "f"}]})
    assert allowed.tool_choice["tools"] == [{"type": "function", "name": "f"}]
    refused({"model": "m", "input": "x", "tools": tools,
             "tool_choice": {"type": "function", "name": "h"}}, "tool_choice.name")
    refused({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice")
    refused({"model": "m", "input": "x", "tools": tools, "tool_choice": "sometimes"},
            "tool_choice")
    refused({"model": "m", "input": "x", "tools": tools,
             "tool_choice": {"type": "web_search_preview"}}, "tool_choice.type")


def test_json_schema_format_is_kept_flat() -> None:
    fmt = {"type": "json_schema", "name": "person", "schema": {"type": "object"},
           "strict": True}
    assert parse(text={"format": fmt}).text_format == {**fmt, "description": None}
    described = {**fmt, "description": "a person"}
    assert parse(text={"format": described}).text_format == described


def test_item_count_is_bounded() -> None:
    items = [{"role": "user", "content": "x"}] * 9
    refused({"model": "m", "input": items}, "input", "too many")


def test_accepted_hints_are_echoed() -> None:
    request = parse(prompt_cache_key="k", safety_identifier="s", service_tier="auto",
                    max_tool_calls=3, reasoning={"effort": "low", "summary": "auto"},
                    text={"format": {"type": "text"}, "verbosity": "low"})
    echo = request.echo()
    assert echo["prompt_cache_key"] == "k" and echo["safety_identifier"] == "s"
    assert echo["max_tool_calls"] == 3 and echo["reasoning"] == {"effort": "low",
                                                                  "summary": "auto"}
    assert echo["text"]["verbosity"] == "low"


def test_echo_carries_effective_sampling_values_as_numbers() -> None:
    echo = parse().echo()
    assert echo["temperature"] == 1.0 and echo["top_p"] == 1.0
    assert echo["presence_penalty"] == 0.0 and echo["frequency_penalty"] == 0.0
    assert echo["top_logprobs"] == 0
    assert "completed_at" in echo and echo["completed_at"] is None
    echo = parse(temperature=0.2, top_p=0.5, presence_penalty=-1.5, frequency_penalty=2).echo()
    assert (echo["temperature"], echo["top_p"]) == (0.2, 0.5)
    assert (echo["presence_penalty"], echo["frequency_penalty"]) == (-1.5, 2)


@pytest.mark.parametrize("name", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("value", [-2.1, 2.5, "x", True])
def test_penalties_are_range_checked(name: str, value: Any) -> None:
    refused({"model": "m", "input": "x", name: value}, name, tolerance=STRICT)


def test_an_assistant_message_keeps_its_phase() -> None:
    request = parse(input=[{"role": "assistant", "content": "thinking aloud",
                            "phase": "commentary"},
                           {"role": "user", "content": "go on"}])
    assert request.input[0]["phase"] == "commentary"
    assert "phase" not in request.input[1]
    refused({"model": "m", "input": [{"role": "assistant", "content": "x", "phase": "late"}]},
            "input[0].phase")


def test_evolved_is_replace_with_every_field_copied() -> None:
    """`ResponsesRequest.evolved` stands in for `dataclasses.replace` on the create path: the
    same object for any field changed, and an unknown field refused as replace refuses it."""
    import dataclasses

    request = parse_request({"model": "m", "input": "hi", "temperature": 0.5,
                             "tools": [{"type": "function", "name": "f",
                                        "parameters": {"type": "object"}}]}, counter_ids())
    for changes in ({}, {"cache_salt": "salt"}, {"input": [], "cache_salt": "s", "store": False}):
        assert request.evolved(**changes) == dataclasses.replace(request, **changes)
    evolved = request.evolved(cache_salt="salt")
    assert evolved is not request and evolved.tools is request.tools  # shallow, as replace
    with pytest.raises(TypeError, match="no_such"):
        request.evolved(no_such=1)


def test_a_parsed_request_is_the_dataclass_it_would_construct() -> None:
    """Parsing sets the request's state without the dataclass's `__init__` (~5 µs a create):
    the same fields, the same defaults, each factory's default a fresh object."""
    first, second = parse(), parse()
    constructed = ResponsesRequest(**{f.name: getattr(first, f.name)
                                      for f in fields(ResponsesRequest) if f.name != "media"})
    assert first == constructed
    assert first.__dict__.keys() == constructed.__dict__.keys()
    assert first.media == {} and first.media is not second.media
    with pytest.raises(AttributeError):
        first.model = "other"  # type: ignore[misc]


# Every optional field the parse reads only when the body has it, set to a valid value.
_EVERY_FIELD: dict[str, Any] = {
    "instructions": "be brief", "prompt": {"id": "pmpt_1"},
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "required", "parallel_tool_calls": False,
    "text": {"format": {"type": "json_object"}, "verbosity": "low"},
    "reasoning": {"effort": "low", "summary": "auto"}, "max_output_tokens": 5,
    "temperature": 0.5, "top_p": 0.5, "metadata": {"a": "b"}, "user": "u", "stream": True,
    "include": ["message.output_text.logprobs"], "service_tier": "flex",
    "prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
    "max_tool_calls": 3, "presence_penalty": 1, "frequency_penalty": -1,
    "prompt_cache_options": {"mode": "explicit"}, "top_logprobs": 2, "truncation": "auto",
}


@pytest.mark.parametrize("body", [{}, _EVERY_FIELD, {k: None for k in _EVERY_FIELD}])
def test_the_request_is_the_dataclass_it_would_construct(body: dict[str, Any]) -> None:
    """The parse builds the request without the frozen dataclass's `__init__`: the same
    fields, in their declared order, with the same values as the constructor would give."""
    request = parse(**body)
    names = [f.name for f in fields(ResponsesRequest)]
    assert list(vars(request)) == names
    assert request == ResponsesRequest(**vars(request))
    if not any(v is not None for v in body.values()):
        assert request == ResponsesRequest(model="m", input=request.input)


def test_every_field_read_when_given() -> None:
    request = parse(**_EVERY_FIELD)
    assert (request.instructions, request.prompt, request.tool_choice) == (
        "be brief", {"id": "pmpt_1"}, "required")
    assert request.parallel_tool_calls is False and request.stream is True
    assert request.text == {"format": {"type": "json_object"}, "verbosity": "low"}
    assert (request.max_output_tokens, request.temperature, request.top_p) == (5, 0.5, 0.5)
    assert (request.presence_penalty, request.frequency_penalty, request.top_logprobs) == (
        1.0, -1.0, 2)
    assert request.prompt_cache_options == {"mode": "explicit", "ttl": "30m"}
    assert request.truncation == "auto" and request.metadata == {"a": "b"}


def test_defaults_made_fresh_for_each_request() -> None:
    first, second = parse(), parse()
    for name in ("text", "metadata", "tools", "hosted_options", "media"):
        assert getattr(first, name) == getattr(second, name)
        assert getattr(first, name) is not getattr(second, name), name


def test_the_first_bad_field_of_several_is_named() -> None:
    """The checks run in the order they always did: of two bad fields, the earlier one's."""
    refused({"model": "m", "input": "hi", "parallel_tool_calls": 1, "context_management": 3},
            "parallel_tool_calls")
    refused({"model": "m", "input": "hi", "instructions": 3, "top_logprobs": 99},
            "instructions")
    refused({"model": "m", "input": "hi", "temperature": 9, "truncation": "x"}, "temperature")
    refused({"model": "m", "input": "hi", "stream": "yes", "include": ["x"]}, "stream")


def test_a_short_create_parses_in_few_calls() -> None:
    """A body with four fields reads those four: each absent optional field was a call (and
    the frozen dataclass's `__init__` a call per field, which cProfile does not see): 12.2 ->
    6.5 µs for this body. Python calls (builtins counted): 85 before, 50 after."""
    body = {"model": "m", "input": "hi", "stream": True, "store": False}
    profile = cProfile.Profile()
    profile.enable()
    parse_request(body, counter_ids())
    profile.disable()
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(stat[1] for stat in stats.values())
    assert calls <= 54, calls
