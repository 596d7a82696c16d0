"""Real vLLM's shapes through the proxy, with the official `openai` SDK: simulators started as
vLLM personas (`--vllm-version 0.10`, realistic model names: each name picks its persona,
simulator/answer/personas.py) over real HTTP, a proxy process in front, every streamed event
validated against the SDK's types (tests/support/conformance.py).

Each test first shows the persona's shape on the wire (straight from the simulator, or in
what the simulator recorded), then what the proxy makes of it."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support.clients import streamed
from tests.support.servers import ServerProcess, start_proxy, start_simulator

pytestmark = pytest.mark.e2e

QWEN = "Qwen/Qwen3-8B"
GPT_OSS = "openai/gpt-oss-20b"
MISTRAL = "mistralai/Mistral-Small-3.2-24B-Instruct-2506"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MODELS = (QWEN, GPT_OSS, MISTRAL, LLAMA)

WEATHER = {
    "type": "function", "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}
# Its one allowed value makes the arguments long enough to cut mid-string.
COMMAND = "rm -rf /tmp/build/cache/objects/old"
SHELL = {
    "type": "function", "name": "shell", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string",
                                                                "enum": [COMMAND]}},
                   "required": ["command"]},
}


@pytest.fixture(scope="module")
def simulator() -> Iterator[ServerProcess]:
    """This module's simulator (the conftest's `proxy`, `client` and `sim` use it): a vLLM 0.10
    replica serving one model per persona."""
    flags = ["--vllm-version", "0.10"]
    for model in MODELS:
        flags += ["--model", model]
    server = start_simulator(*flags)
    yield server
    server.stop()


@contextlib.contextmanager
def replica(*flags: str) -> Iterator[tuple[ServerProcess, openai.OpenAI]]:
    """A simulator of its own with `flags`, a proxy in front, and an SDK client on it."""
    sim = start_simulator(*flags)
    try:
        proxy = start_proxy(sim.url)
        try:
            with openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0) as sdk:
                yield sim, sdk
        finally:
            proxy.stop()
    finally:
        sim.stop()


def raw_chunks(url: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A streamed chat completion straight from the simulator: its JSON frames."""
    answer = httpx.post(url + "/v1/chat/completions", json={**body, "stream": True},
                        headers=headers, timeout=30)
    answer.raise_for_status()
    frames = [line[6:] for line in answer.text.split("\n") if line.startswith("data: ")]
    return [json.loads(f) for f in frames if f != "[DONE]"]


def deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c.get("choices")]


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: v for k, v in tool.items() if k != "type"}
    return {"type": "function", "function": function}


def output_types(events: list[dict[str, Any]]) -> list[str]:
    final = events[-1]["response"]
    return [item["type"] for item in final["output"]]


# -- qwen3 (hermes + qwen3 reasoning parser) ---------------------------------------------------
def test_qwen3_parallel_calls_are_reasoning_and_two_calls_and_one_assistant_message_back(
        simulator: ServerProcess, proxy: ServerProcess, sim: SimControl) -> None:
    prompt = "weather in Paris and Rome [[sim tools=2]]"
    wire = deltas(raw_chunks(simulator.url, {"model": QWEN, "tools": [chat_tool(WEATHER)],
                                        "messages": [{"role": "user", "content": prompt}]}))
    assert {"content": "\n\n"} in wire and {"content": "\n"} in wire  # the shape is sent
    assert any("reasoning_content" in d for d in wire)  # 0.10's key

    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    with client:
        events = streamed(client, model=QWEN, input=prompt, tools=[WEATHER])
        assert output_types(events) == ["reasoning", "function_call", "function_call"]
        final = events[-1]["response"]
        calls = [item for item in final["output"] if item["type"] == "function_call"]
        assert all(c["status"] == "completed" for c in calls)
        follow = client.responses.create(
            model=QWEN, previous_response_id=final["id"], tools=[WEATHER],
            input=[{"type": "function_call_output", "call_id": c["call_id"],
                    "output": f"sunny {n}"} for n, c in enumerate(calls)])
    assert follow.status == "completed"
    sent = sim.stats()["last_request"]["messages"]
    assistants = [m for m in sent if m["role"] == "assistant"]
    assert len(assistants) == 1  # both calls in ONE assistant message
    assert [c["id"] for c in assistants[0]["tool_calls"]] == [c["call_id"] for c in calls]
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "tool"]


def test_call_cut_by_max_tokens_is_incomplete_though_vllm_says_tool_calls(
        simulator: ServerProcess, openai_client: openai.OpenAI) -> None:
    prompt = "run shell [[sim reasoning=0]]"
    chunks = raw_chunks(simulator.url, {"model": QWEN, "tools": [chat_tool(SHELL)], "max_tokens": 4,
                                   "messages": [{"role": "user", "content": prompt}]})
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert finish[-1] == "tool_calls"  # vLLM 0.10's report of a cut call
    arguments = "".join(tc["function"].get("arguments", "") for d in deltas(chunks)
                        for tc in d.get("tool_calls", ()))
    assert json.loads(arguments) == {"command": "rm -rf"}  # and it completed the cut JSON

    events = streamed(openai_client, model=QWEN, input=prompt, tools=[SHELL], max_output_tokens=4)
    final = events[-1]["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert calls and all(c["status"] != "completed" for c in calls)


# -- mistral ---------------------------------------------------------------------------------
def test_mistral_nine_character_ids_and_null_id_fragments(
        simulator: ServerProcess, openai_client: openai.OpenAI, sim: SimControl) -> None:
    prompt = "weather twice [[sim tools=2]] city=Paris"
    wire = deltas(raw_chunks(simulator.url, {"model": MISTRAL, "tools": [chat_tool(WEATHER)],
                                        "messages": [{"role": "user", "content": prompt}]}))
    fragments = [tc for d in wire for tc in d.get("tool_calls", ())]
    assert any(tc["id"] is None for tc in fragments)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", tc["id"]) for tc in fragments if tc["id"])

    events = streamed(openai_client, model=MISTRAL, input=prompt, tools=[WEATHER])
    final = events[-1]["response"]
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert len(calls) == 2 and len({c["call_id"] for c in calls}) == 2
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", c["call_id"]) for c in calls)
    assert all(json.loads(c["arguments"]) == {"city": "Paris"} for c in calls)
    follow = openai_client.responses.create(
        model=MISTRAL, previous_response_id=final["id"], tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": c["call_id"], "output": "rain"}
               for c in calls])
    assert follow.status == "completed"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == \
        [c["call_id"] for c in calls]


# -- gpt-oss (harmony) on 0.10 -----------------------------------------------------------------
def test_gpt_oss_v010_takes_a_call_only_assistant_message_from_the_proxy(
        simulator: ServerProcess, openai_client: openai.OpenAI, sim: SimControl) -> None:
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    refused = httpx.post(simulator.url + "/v1/chat/completions", timeout=30,
                         json={"model": GPT_OSS, "messages": history})
    assert refused.status_code == 400
    assert "Error in preprocessing prompt inputs" in refused.json()["error"]["message"]

    answer = openai_client.responses.create(model=GPT_OSS, tools=[WEATHER], input=[
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert answer.status == "completed"
    # 0.10 names a tool result's author from the tool message's `name` only: the proxy sends it
    assert answer.output_text == "Tool results: get_weather=sunny"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == [""]


@pytest.mark.parametrize(("effort", "sent"), [("minimal", "low"), ("xhigh", "high")])
def test_gpt_oss_takes_codex_efforts_mapped(simulator: ServerProcess, openai_client: openai.OpenAI,
                                            sim: SimControl, effort: str, sent: str) -> None:
    refused = httpx.post(simulator.url + "/v1/chat/completions", timeout=30, json={
        "model": GPT_OSS, "reasoning_effort": effort,
        "messages": [{"role": "user", "content": "hi"}]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning_effort"

    events = streamed(openai_client, model=GPT_OSS, input="think about it",
                      reasoning={"effort": effort})
    assert events[-1]["type"] == "response.completed"
    assert sim.stats()["last_request"]["reasoning_effort"] == sent


@pytest.mark.parametrize(("effort", "sent"), [("minimal", "low"), ("xhigh", "high"),
                                             ("none", "low"), ("medium", "medium")])
def test_a_v010_replica_gets_efforts_it_validates_for_every_model(
        simulator: ServerProcess, openai_client: openai.OpenAI, sim: SimControl, effort: str,
        sent: str) -> None:
    # vLLM 0.10 validates reasoning_effort against low/medium/high for any model, Qwen3 too:
    # the proxy reads the replica's /version when it comes up and maps to what it takes.
    assert httpx.get(simulator.url + "/version", timeout=10).json() == {"version": "0.10"}
    refused = httpx.post(simulator.url + "/v1/chat/completions", timeout=30, json={
        "model": QWEN, "reasoning_effort": "minimal",
        "messages": [{"role": "user", "content": "hi"}]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning_effort"

    events = streamed(openai_client, model=QWEN, input="think about it",
                      reasoning={"effort": effort})
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["reasoning"]["effort"] == effort  # the echo: what was asked
    assert sim.stats()["last_request"]["reasoning_effort"] == sent


# -- X-Request-Id on a 0.10 replica ------------------------------------------------------------
def test_one_client_request_id_on_concurrent_requests(
        simulator: ServerProcess, proxy: ServerProcess, sim: SimControl) -> None:
    slow = {"model": QWEN, "messages": [{"role": "user", "content": "hi [[sim delay_ms=40]]"}]}
    direct: list[list[dict[str, Any]]] = []
    pair = [threading.Thread(target=lambda: direct.append(
        raw_chunks(simulator.url, slow, {"x-request-id": "same"}))) for _ in range(2)]
    for thread in pair:
        thread.start()
    for thread in pair:
        thread.join(30)
    # the persona: a second request under an id in flight fails (in-band, before any chunk)
    failed = [chunks for chunks in direct if "error" in chunks[0]]
    assert len(direct) == 2 and len(failed) == 1
    assert failed[0][0]["error"]["message"] == "Request id chatcmpl-same already running."
    assert sim.stats()["duplicate_ids"] == 1
    sim.reset()

    outcomes: list[str] = []

    def through_proxy(prompt: str) -> None:
        with openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0) as sdk:
            events = streamed(sdk, model=QWEN, input=prompt,
                              extra_headers={"x-request-id": "client-id-7"})
            outcomes.append(events[-1]["response"]["status"])

    threads = [threading.Thread(target=through_proxy, args=(f"hi {n} [[sim delay_ms=40]]",))
               for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert outcomes == ["completed", "completed"]
    stats = sim.stats()
    assert stats["duplicate_ids"] == 0 and stats["max_concurrent_streams"] == 2
    ids = stats["request_ids"]
    assert len(ids) == 2 and len(set(ids)) == 2 and all(i.startswith("client-id-7") for i in ids)


# -- the tool-choosing heuristic ---------------------------------------------------------------
@pytest.mark.parametrize("model", [LLAMA, QWEN])
def test_weather_prompt_calls_get_weather(openai_client: openai.OpenAI, model: str) -> None:
    events = streamed(openai_client, model=model, input="What's the weather like in San Francisco?",
                      tools=[WEATHER])
    final = events[-1]["response"]
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"]
    assert final["status"] == "completed"
    assert not [item for item in final["output"] if item["type"] == "message"]


# -- a replica started without --enable-auto-tool-choice ---------------------------------------
def test_replica_without_auto_tool_choice_is_a_named_400() -> None:
    with replica("--no-auto-tool-choice", "--model", QWEN) as (sim, sdk):
        raw = httpx.post(sim.url + "/v1/chat/completions", timeout=30, json={
            "model": QWEN, "tool_choice": "auto", "tools": [chat_tool(WEATHER)],
            "messages": [{"role": "user", "content": "hi"}]})
        assert raw.status_code == 400 and "--enable-auto-tool-choice" in raw.text
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.responses.create(model=QWEN, input="hi", tools=[WEATHER], tool_choice="auto")
    error = caught.value.body
    assert isinstance(error, dict) and error.get("code") == "auto_tool_choice_unavailable"
    assert error.get("param") == "tool_choice"


# -- gpt-oss on 0.12-0.15: both reasoning keys, nulls, several tokens per step -------------------
def test_gpt_oss_v012_mixed_deltas_reasoning_once_and_in_order() -> None:
    prompt = "hi [[sim reasoning=4]]"
    with replica("--vllm-version", "0.12", "--model", GPT_OSS) as (sim, sdk):
        wire = deltas(raw_chunks(sim.url, {"model": GPT_OSS,
                                           "messages": [{"role": "user", "content": prompt}]}))
        events = streamed(sdk, model=GPT_OSS, input=prompt)
    mixed = [d for d in wire if d.get("content") and d.get("reasoning")]
    assert mixed and mixed[0]["reasoning_content"] == mixed[0]["reasoning"]
    assert all("reasoning_content" in d for d in wire)  # null where empty
    final = events[-1]["response"]
    assert output_types(events) == ["reasoning", "message"]
    text = "".join(part["text"] for part in final["output"][0].get("content") or ())
    assert text == "Let me think about"  # once, though both keys carry it
    assert final["output"][1]["content"][0]["text"] == "You said: hi"


# -- vLLM 0.32 (tests/fixtures/vllm/real-0.32/): llama3_json's closing fragment, a cut call -------
def test_llama3_v032_whole_and_cut_calls_through_the_sdk() -> None:
    ask = "please call get_weather city=Paris"
    with replica("--vllm-version", "0.32", "--model", LLAMA) as (sim, sdk):
        wire = raw_chunks(sim.url, {"model": LLAMA, "tools": [chat_tool(WEATHER)],
                                    "messages": [{"role": "user", "content": ask}]})
        whole = streamed(sdk, model=LLAMA, input=ask, tools=[WEATHER])
        cut = streamed(sdk, model=LLAMA, input=ask, tools=[WEATHER], max_output_tokens=1)
    # on the wire: a head without arguments, 16-hex id, the finish on an empty fragment
    head = wire[1]["choices"][0]["delta"]["tool_calls"][0]
    assert list(head["function"]) == ["name"] and len(head["id"]) == len("chatcmpl-tool-") + 16
    end = wire[-1]["choices"][0]
    assert end["finish_reason"] == "tool_calls"
    assert end["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}
    call = whole[-1]["response"]["output"][0]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    # cut after its head: no argument delta at all, the done carries "" (as OpenAI)
    kinds = [e["type"] for e in cut]
    assert "response.function_call_arguments.delta" not in kinds
    assert "response.function_call_arguments.done" in kinds
    final = cut[-1]["response"]
    assert final["status"] == "incomplete" and final["output"][0]["arguments"] == ""
