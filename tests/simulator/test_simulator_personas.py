"""The simulator's personas against real vLLM's streams (tests/unit/golden/vllm/*.sse, copies of
../shared/vllm): the same chunks, key for key, token boundaries aside, and the version rules
of simulator/answer/personas.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.simulator import wire
from proxy.simulator.answer import personas, script, tools
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import SimError
from proxy.simulator.request import Tool, parse_chat
from tests.support.sse import data_payloads

VLLM = Path(__file__).parents[1] / "unit" / "golden" / "vllm"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
LONG = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {k: {"type": "string"} for k in ("city", "unit", "day")}}}}
SHELL = {"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "string",
                                                 "enum": ["rm -rf /tmp/build"]}}}}}


def sim_stream(model: str, text: str, *, version: str | None = None, usage: bool = True,
               **extra: Any) -> list[Any]:
    config = SimConfig(models=(model,), vllm_version=version,
                       prompt_tokens_details="cached_tokens" in text)
    body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True,
            **({"stream_options": {"include_usage": True}} if usage else {}), **extra}
    plan = script.plan(parse_chat(body, config), config, request_id="chatcmpl-req1",
                       created=1)
    return [p for _, p in wire.stream_frames(plan, include_usage=usage, continuous=False)]


def _keys(value: Any) -> Any:
    """Which keys, in which order, and which values are null: a chunk's shape."""
    if isinstance(value, dict):
        return tuple((k, _keys(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_keys(v) for v in value)
    return None if value is None else type(value).__name__


def skeleton(frames: list[Any]) -> list[Any]:
    """The frames' shapes (finish reasons kept), consecutive repeats collapsed: what is left
    when token boundaries do not matter."""
    out: list[Any] = []
    for frame in frames:
        if frame == "[DONE]":
            shape: Any = "[DONE]"
        elif frame.get("choices"):
            choice = frame["choices"][0]
            shape = (_keys(choice["delta"]), choice["finish_reason"],
                     "stop_reason" in choice and type(choice["stop_reason"]).__name__)
        else:
            shape = ("usage", _keys(frame.get("usage")))
        if not out or out[-1] != shape:
            out.append(shape)
    return out


def real(name: str) -> list[Any]:
    return data_payloads((VLLM / f"{name}.sse").read_bytes())


@pytest.mark.parametrize(("name", "model", "version", "text", "extra"), [
    ("hermes_qwen3_v010", "Qwen/Qwen3-8B", "0.10", "[[sim tools=2 reasoning=2]]",
     {"tools": [WEATHER]}),
    ("mistral_v11", "mistralai/Mistral-Small-3.2-24B-Instruct-2506", "0.11",
     "get_weather city=Paris", {"tools": [WEATHER]}),
    ("reasoning_v016", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "0.19",
     "hi [[sim reasoning=2 tokens=2]] cached_tokens", {}),
    ("truncated_call_v010", "Qwen/Qwen3-8B", "0.10", "shell [[sim reasoning=0]]",
     {"tools": [SHELL], "max_tokens": 3}),
    ("harmony_mixed_delta", "openai/gpt-oss-120b", "0.16", "hi [[sim reasoning=2 tokens=3]]",
     {}),
])
def test_persona_streams_real_vllms_chunks(name: str, model: str, version: str, text: str,
                                           extra: dict[str, Any]) -> None:
    usage = name != "harmony_mixed_delta"
    ours = sim_stream(model, text, version=version, usage=usage, **extra)
    assert skeleton(ours) == skeleton(real(name))


def test_gpt_oss_v012_sends_only_the_real_streams_delta_shapes() -> None:
    """Three tokens per engine step: the same delta shapes, some of them in one chunk."""
    ours = sim_stream("openai/gpt-oss-120b", "get_weather [[sim reasoning=3]]", version="0.12",
                      tools=[LONG])
    assert set(skeleton(ours)) == set(skeleton(real("gptoss_harmony_v012")))
    mixed = [f["choices"][0]["delta"] for f in ours
             if f != "[DONE]" and f["choices"] and "tool_calls" in f["choices"][0]["delta"]]
    assert mixed[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads("".join(tc["function"]["arguments"] for d in mixed
                              for tc in d["tool_calls"])) == \
        {"city": "sim", "unit": "sim", "day": "sim"}


def test_truncated_call_v010_closes_the_json_later_versions_do_not() -> None:
    def arguments(version: str) -> tuple[str, str]:
        frames = sim_stream("Qwen/Qwen3-8B", "shell [[sim reasoning=0]]", version=version,
                            tools=[SHELL], max_tokens=3)
        chunks = [f for f in frames if f != "[DONE]" and f["choices"]]
        text = "".join(tc["function"].get("arguments", "") for c in chunks
                       for tc in c["choices"][0]["delta"].get("tool_calls", ()))
        return text, chunks[-1]["choices"][0]["finish_reason"]

    assert arguments("0.10") == ('{"command": "rm"}', "tool_calls")
    assert arguments("0.12") == ('{"command": "rm', "tool_calls")
    assert arguments("0.20") == ('{"command": "rm', "length")
    config = SimConfig(models=("Qwen/Qwen3-8B",), vllm_version="0.10")
    whole = wire.completion(script.plan(parse_chat({
        "messages": [{"role": "user", "content": "shell [[sim reasoning=0]]"}],
        "tools": [SHELL], "max_tokens": 3}, config), config, request_id="r", created=1))
    assert whole["choices"][0]["finish_reason"] == "length"  # nothing was extracted
    assert whole["choices"][0]["message"]["tool_calls"] == []


@pytest.mark.parametrize(("version", "keys"), [
    ("0.10", {"reasoning_content"}), ("0.11", {"reasoning_content"}),
    ("0.12", {"reasoning", "reasoning_content"}), ("0.15", {"reasoning", "reasoning_content"}),
    ("0.16", {"reasoning"}),
])
def test_reasoning_key_by_version(version: str, keys: set[str]) -> None:
    frames = sim_stream("Qwen/Qwen3-8B", "hi [[sim reasoning=1]]", version=version)
    reasoning = frames[1]["choices"][0]["delta"]
    assert set(reasoning) == keys
    content = frames[3]["choices"][0]["delta"]  # after the "\n\n"
    assert content == ({"content": "You", "reasoning_content": None}
                       if len(keys) == 2 else {"content": "You"})
    details = frames[-2]["usage"].get("completion_tokens_details")
    assert details == ({"reasoning_tokens": 1} if version == "0.16" else None)
    assert "prompt_tokens_details" not in frames[-2]["usage"]  # no --enable-prompt-tokens-..


def test_efforts_and_gpt_oss_history_per_version() -> None:
    def parse(model: str, version: str, **extra: Any) -> Any:
        config = SimConfig(models=(model,), vllm_version=version)
        return parse_chat({"model": model, "messages": [{"role": "user", "content": "hi"}],
                           **extra}, config)

    for model, version in (("Qwen/Qwen3-8B", "0.10"), ("openai/gpt-oss-20b", "0.16")):
        with pytest.raises(SimError) as refused:
            parse(model, version, reasoning_effort="minimal")
        assert refused.value.body()["error"]["param"] == "reasoning_effort"
    assert parse("Qwen/Qwen3-8B", "0.12", reasoning_effort="minimal").reasoning_effort == \
        "minimal"
    call_only = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "x"}]
    config = SimConfig(models=("openai/gpt-oss-20b",), vllm_version="0.10.1")
    with pytest.raises(SimError) as broken:
        parse_chat({"messages": call_only}, config)
    assert "Error in preprocessing prompt inputs" in broken.value.body()["error"]["message"]
    assert parse_chat({"messages": [{**call_only[0], "content": ""}, call_only[1]]}, config)
    later = SimConfig(models=("openai/gpt-oss-20b",), vllm_version="0.12")
    assert parse_chat({"messages": call_only}, later)
    # up to 0.11 the tool result's author is the tool message's `name`, nothing else
    fixed = [{**call_only[0], "content": ""}, call_only[1]]
    assert script.answer_text(parse_chat({"messages": fixed}, config)) == "Tool results: =x"
    named = [fixed[0], {**fixed[1], "name": "f"}]
    assert script.answer_text(parse_chat({"messages": named}, config)) == "Tool results: f=x"
    assert script.answer_text(parse_chat({"messages": fixed}, later)) == "Tool results: f=x"


def test_generic_model_keeps_its_shapes_and_names_pick_personas() -> None:
    config = SimConfig(models=("sim-model", "meta-llama/Llama-3.1-8B-Instruct"))
    assert config.persona_for("sim-model") is personas.GENERIC
    assert config.persona_for("meta-llama/Llama-3.1-8B-Instruct").name == "llama3"
    assert SimConfig(persona="mistral").persona_for("sim-model").name == "mistral"
    with pytest.raises(ValueError):
        SimConfig(persona="gpt-5")
    with pytest.raises(ValueError):
        SimConfig(vllm_version="latest")
    assert personas.parse_version("v0.10.1") == (0, 10)


def test_close_json() -> None:
    assert personas.close_json('{"command": "rm -rf /tmp/bu') == '"}'
    assert personas.close_json('{"a": [1, {"b": "x\\') == '\\"}]}'
    assert personas.close_json('{"a": "}"') == "}"


def test_auto_mode_calls_a_tool_the_prompt_is_about() -> None:
    weather = Tool("get_weather", {})
    words = tools._words("What's the weather like in San Francisco?")
    assert tools.relevant_to(weather, words)
    assert tools.relevant_to(Tool("lookupWeatherForecast", {}), words)
    assert not tools.relevant_to(Tool("add", {}, "Add two numbers."), words)
    assert not tools.relevant_to(Tool("get_time", {}, "The current time in a city."), words)
    assert tools.relevant_to(Tool("lookup", {}, "Forecast of the weather in a city."),
                             tools._words("the forecast for tomorrow, weather-wise"))
    assert not tools.relevant_to(weather, tools._words("get_weathers is not a word"))
    config = SimConfig()
    req = parse_chat({"messages": [{"role": "user", "content": "Weather in Oslo?"}],
                      "tools": [WEATHER], "tool_choice": "auto"}, config)
    assert [c.name for c in tools.choose_calls(req)] == ["get_weather"]
    text = parse_chat({"messages": [{"role": "user", "content": "hello there"}],
                       "tools": [WEATHER]}, config)
    assert tools.choose_calls(text) == []
