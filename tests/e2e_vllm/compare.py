"""One tool-calling turn through the proxy against vLLM's own answer to the same chat request;
shared by the hermes and llama3_json modules (the comparison holds whatever the parser)."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.e2e_vllm.fleet import Vllm
from tests.support.clients import streamed

WEATHER_PARAMETERS = {"type": "object",
                      "properties": {"city": {"type": "string", "description": "City name"}},
                      "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather for a city",
           "parameters": WEATHER_PARAMETERS}
CHAT_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": WEATHER_PARAMETERS}}
ASK = "What is the weather in Paris?"


def chat_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """The Responses `tool_choice` in chat-completions form."""
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def tool_turn(client: openai.OpenAI, vllm: Vllm, choice: str | dict[str, Any],
              max_tokens: int, prompt: str = ASK) -> tuple[list[dict[str, Any]],
                                                           dict[str, Any]]:
    """(the proxy's streamed events, vLLM's own answer) for one turn with the weather tool."""
    expected = vllm.chat(messages=[{"role": "user", "content": prompt}], tools=[CHAT_WEATHER],
                         tool_choice=chat_choice(choice), max_tokens=max_tokens,
                         parallel_tool_calls=True)
    events = streamed(client, model=vllm.model, input=prompt, tools=[WEATHER],
                      tool_choice=choice, max_output_tokens=max_tokens, temperature=0,
                      store=False)
    return events, expected


def calls_of(response: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(item["name"], json.loads(item["arguments"]))
            for item in response["output"] if item["type"] == "function_call"]


def expected_calls(answer: dict[str, Any]) -> list[tuple[str, Any]]:
    calls = answer["choices"][0]["message"].get("tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def assert_same_turn(events: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    """Calls (names and parsed arguments), text and usage as vLLM answered; no empty
    argument deltas on the way."""
    final = events[-1]["response"]
    assert calls_of(final) == expected_calls(expected)
    text = expected["choices"][0]["message"]["content"] or ""
    if text.strip():  # whitespace beside calls opens no message item (README, vLLM versions)
        texts = [part["text"] for item in final["output"] if item["type"] == "message"
                 for part in item["content"]]
        assert "".join(texts) == text
    assert final["usage"]["input_tokens"] == expected["usage"]["prompt_tokens"]
    assert final["usage"]["output_tokens"] == expected["usage"]["completion_tokens"]
    assert_no_empty_argument_deltas(events)


def assert_no_empty_argument_deltas(events: list[dict[str, Any]]) -> None:
    empty = [e for e in events
             if e["type"] == "response.function_call_arguments.delta" and e["delta"] == ""]
    assert empty == []


def follow_up(client: openai.OpenAI, vllm: Vllm, call: dict[str, Any], result: str,
              max_tokens: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The turn after the tool ran: (the proxy's final response, vLLM's own answer)."""
    expected = vllm.chat(messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call["call_id"], "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["call_id"], "content": result},
    ], tools=[CHAT_WEATHER], max_tokens=max_tokens)
    events = streamed(client, model=vllm.model, tools=[WEATHER], max_output_tokens=max_tokens,
                      temperature=0, store=False, input=[
                          {"role": "user", "content": ASK},
                          {"type": "function_call", "call_id": call["call_id"],
                           "name": call["name"], "arguments": call["arguments"]},
                          {"type": "function_call_output", "call_id": call["call_id"],
                           "output": result}])
    return events[-1]["response"], expected
