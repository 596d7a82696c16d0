"""Responses request (+ history) → one vLLM chat-completions request (docs/protocol.md §6.1)."""

from __future__ import annotations

import base64
from typing import Any

from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.items import open_reasoning, parse_input, seal_reasoning
from proxy.core.seal import Sealer
from proxy.core.translate.chat import to_chat_request, to_messages


def chat(history: list[dict[str, Any]] | None = None, **body: Any) -> dict[str, Any]:
    request = parse_request({"model": "m", "input": "hi", **body}, counter_ids())
    return to_chat_request(request, history or [])


def test_minimal_request_always_streams_with_usage() -> None:
    assert chat() == {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "stream": True, "stream_options": {"include_usage": True}}


def test_sampling_and_limits() -> None:
    out = chat(max_output_tokens=50, temperature=0.2, top_p=0.9, user="u1",
               reasoning={"effort": "high"})
    assert out["max_tokens"] == 50 and out["temperature"] == 0.2 and out["top_p"] == 0.9
    assert out["user"] == "u1" and out["reasoning_effort"] == "high"


def test_instructions_come_first_and_developer_joins_the_one_system_message() -> None:
    out = chat(instructions="rules", input=[
        {"role": "developer", "content": "dev"}, {"role": "user", "content": "q"}])
    assert out["messages"] == [{"role": "system", "content": "rules\n\ndev"},
                               {"role": "user", "content": "q"}]


def test_history_precedes_input_and_instructions_precede_history() -> None:
    history = parse_input([{"role": "user", "content": "old"},
                           {"role": "assistant", "content": "reply"}], counter_ids(),
                          max_items=10)
    out = chat(history, instructions="now")
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "user"]
    assert out["messages"][2] == {"role": "assistant", "content": "reply"}


def test_images_become_image_url_parts_and_text_files_text() -> None:
    data = base64.b64encode(b"contents").decode()
    out = chat(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        {"type": "input_file", "file_data": data, "filename": "n.txt"},
    ]}])
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                            "detail": "low"}},
        {"type": "text", "text": "[file: n.txt]\ncontents"},
    ]


def test_function_calls_merge_into_one_assistant_message_with_its_text() -> None:
    items = parse_input([
        {"role": "user", "content": "weather in two cities?"},
        {"type": "reasoning", "summary": [],
         "content": [{"type": "reasoning_text", "text": "two calls"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"a"}'},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"c":"b"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sun"},
        {"type": "function_call_output", "call_id": "c2", "output": "rain"},
    ], counter_ids(), max_items=20)
    assert to_messages(items) == [
        {"role": "user", "content": "weather in two cities?"},
        {"role": "assistant", "content": "Checking.", "reasoning": "two calls", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"c":"a"}'}},
            {"id": "c2", "type": "function", "function": {"name": "w", "arguments": '{"c":"b"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "name": "w", "content": "sun"},
        {"role": "tool", "tool_call_id": "c2", "name": "w", "content": "rain"},
    ]

SEALER = Sealer((b"test-secret",), 1 << 20)


def test_a_call_without_text_opens_an_assistant_message_with_empty_content() -> None:
    """Not `content: null`: vLLM 0.10.1 answers it with 400 'Error in preprocessing prompt
    inputs'."""
    items = parse_input([
        {"role": "user", "content": "q"},
        {"type": "reasoning", "summary": [], "encrypted_content": seal_reasoning(SEALER)("sealed")},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ], counter_ids(), max_items=10, sealer=SEALER)
    items = [open_reasoning(item, SEALER, "input")[0] for item in items]
    assert to_messages(items)[1] == {
        "role": "assistant", "content": "", "reasoning": "sealed",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]}


def test_tools_and_tool_choice_take_the_nested_chat_form() -> None:
    tools = [{"type": "function", "name": "f", "description": "d",
              "parameters": {"type": "object"}, "strict": True},
             {"type": "function", "name": "g"}]
    out = chat(tools=tools, tool_choice={"type": "function", "name": "g"},
               parallel_tool_calls=False)
    assert out["tools"] == [
        {"type": "function", "function": {"name": "f", "description": "d",
                                          "parameters": {"type": "object"}, "strict": True}},
        {"type": "function", "function": {"name": "g",
                                          "parameters": {"type": "object", "properties": {}}}},
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "g"}}
    assert out["parallel_tool_calls"] is False


def test_allowed_tools_narrow_the_list() -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]
    out = chat(tools=tools, tool_choice={"type": "allowed_tools", "mode": "required",
                                         "tools": [{"type": "function", "name": "g"}]})
    assert [t["function"]["name"] for t in out["tools"]] == ["g"]
    assert out["tool_choice"] == "required"


def test_text_format_becomes_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    out = chat(text={"format": {"type": "json_schema", "name": "s", "schema": schema,
                                "strict": True}})
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "s", "schema": schema, "strict": True}}
    assert chat(text={"format": {"type": "json_object"}})["response_format"] == {
        "type": "json_object"}
    assert "response_format" not in chat(text={"format": {"type": "text"}})
