"""Tool calls through the proxy (hermes parser): required, named and auto, each equal to
vLLM's own answer to the same chat request; the turn after the tool ran; a call cut by the
token limit."""

from __future__ import annotations

import openai
import pytest

from tests.e2e_vllm.compare import (
    assert_no_empty_argument_deltas,
    assert_same_turn,
    follow_up,
    tool_turn,
)
from tests.e2e_vllm.fleet import Vllm

pytestmark = pytest.mark.e2e_vllm


def test_required_call_equals_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    events, expected = tool_turn(client, vllm, "required", max_tokens=40)
    assert expected["choices"][0]["message"]["tool_calls"]  # the fleet made a call
    assert_same_turn(events, expected)
    assert events[-1]["response"]["status"] == "completed"


def test_named_call_equals_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    events, expected = tool_turn(client, vllm, {"type": "function", "name": "get_weather"},
                                 max_tokens=40)
    assert expected["choices"][0]["message"]["tool_calls"]
    assert_same_turn(events, expected)


def test_auto_equals_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    # Whatever the model chose (this small one answers hermes with JSON as text), the proxy
    # shows the same: the same calls, or the same text.
    events, expected = tool_turn(client, vllm, "auto", max_tokens=40)
    assert_same_turn(events, expected)


def test_the_turn_after_the_tool_equals_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    events, _ = tool_turn(client, vllm, "required", max_tokens=40)
    call = next(item for item in events[-1]["response"]["output"]
                if item["type"] == "function_call")
    final, expected = follow_up(client, vllm, call, "sunny, 21 C", max_tokens=30)
    text = "".join(part["text"] for item in final["output"] if item["type"] == "message"
                   for part in item["content"])
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    if expected["choices"][0]["message"].get("tool_calls"):
        assert calls
    else:
        assert text == expected["choices"][0]["message"]["content"]
    assert final["usage"]["input_tokens"] == expected["usage"]["prompt_tokens"]
    assert final["usage"]["output_tokens"] == expected["usage"]["completion_tokens"]


def test_a_call_cut_by_the_limit_is_incomplete_without_empty_deltas(
        client: openai.OpenAI, vllm: Vllm) -> None:
    # 13 tokens: vLLM 0.32 streams the call's name and is cut before any argument.
    events, expected = tool_turn(client, vllm, "required", max_tokens=13)
    assert expected["choices"][0]["finish_reason"] == "length"
    final = events[-1]["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    for item in final["output"]:
        if item["type"] == "function_call":
            assert item["status"] == "incomplete"
    assert_no_empty_argument_deltas(events)
    assert final["usage"]["output_tokens"] == expected["usage"]["completion_tokens"]
