"""What real clients send, through the official `openai` SDK and raw HTTP against a real proxy
process and the simulator: reasoning summaries, `item_reference` inputs (the Vercel AI SDK's
multi-turn loop), `truncation: "auto"` and `POST /v1/responses/input_tokens`. Every stream passes
`check_stream` (the SDK's types, the invariants, vLLM's rules, the summary parts)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support.clients import streamed
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e




# -- reasoning summaries ------------------------------------------------------------------------
def test_summary_streams_through_the_sdk_stream_helper(openai_client: openai.OpenAI) -> None:
    summary: list[str] = []
    raw: list[str] = []
    with openai_client.responses.stream(model="sim-reasoner", input="why is the sky blue",
                                 reasoning={"effort": "low", "summary": "auto"}) as stream:
        for event in stream:
            if event.type == "response.reasoning_summary_text.delta":
                summary.append(event.delta)
            elif event.type == "response.reasoning_text.delta":
                raw.append(event.delta)
        final = stream.get_final_response()
    # the text once (CONTRACT): as the summary, not also as reasoning_text (llama-index showed
    # both); the summary says what the same request without one shows as its reasoning text
    plain = openai_client.responses.create(model="sim-reasoner", input="why is the sky blue",
                                     reasoning={"effort": "low"}, store=False)
    text = plain.output[0].content[0].text  # type: ignore[union-attr,index]
    assert summary and "".join(summary) == text and raw == []
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and not reasoning.content
    assert [(s.type, s.text) for s in reasoning.summary] == [("summary_text", text)]
    # a stored response replays its summary events too, from its log, identically
    replayed = [e.to_dict() for e in openai_client.responses.retrieve(final.id, stream=True)]
    check_stream(replayed)
    assert [e["type"] for e in replayed].count("response.reasoning_summary_text.delta") == \
        len(summary)


def test_summary_in_a_non_streamed_and_a_raw_streamed_response(openai_client: openai.OpenAI,
                                                               proxy: ServerProcess) -> None:
    response = openai_client.responses.create(model="sim-reasoner", input="think", store=False,
                                       reasoning={"summary": "detailed"})
    reasoning = response.output[0]
    assert reasoning.type == "reasoning" and not reasoning.content
    assert reasoning.summary[0].text.startswith("Let me think")
    with httpx.stream("POST", proxy.url + "/v1/responses", timeout=30, json={
            "model": "sim-reasoner", "input": "think", "stream": True,
            "reasoning": {"summary": "concise"}}) as answer:
        events = data_payloads(answer.read())
    check_stream(events)
    assert "response.reasoning_summary_part.added" in [e["type"] for e in events]
    # no summary asked: none sent
    plain = streamed(openai_client, model="sim-reasoner", input="think", store=False)
    assert not any("summary" in e["type"] for e in plain)
    # a stored non-streamed response has no log: its replay is rebuilt from the final object
    kept = openai_client.responses.create(model="sim-reasoner", input="think",
                                   reasoning={"summary": "auto"})
    rebuilt = [e.to_dict() for e in openai_client.responses.retrieve(kept.id, stream=True)]
    check_stream(rebuilt)
    texts = [e["text"] for e in rebuilt if e["type"] == "response.reasoning_summary_text.done"]
    assert texts == [kept.output[0].summary[0].text]  # type: ignore[union-attr]


# -- item_reference: the Vercel AI SDK's multi-turn loop with its default store: true -----------
WEATHER = {
    "type": "function", "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def post(proxy: ServerProcess, body: dict[str, Any], key: str = "sk-test") -> httpx.Response:
    return httpx.post(proxy.url + "/v1/responses", json=body, timeout=30,
                      headers={"authorization": f"Bearer {key}"})


def test_vercel_multi_turn_loop_over_raw_http(proxy: ServerProcess) -> None:
    first_user = user("please call get_weather city=Paris")
    turn1 = post(proxy, {"model": "sim-reasoner", "input": [first_user], "tools": [WEATHER],
                         "reasoning": {"summary": "auto"}})
    assert turn1.status_code == 200, turn1.text
    reasoning1, call = turn1.json()["output"]
    assert (reasoning1["type"], call["type"]) == ("reasoning", "function_call")
    # step 2: the SDK references the stored reasoning, repeats the call, sends the output
    step2 = [first_user, {"type": "item_reference", "id": reasoning1["id"]},
             {"type": "function_call", "call_id": call["call_id"], "name": call["name"],
              "arguments": call["arguments"]},
             {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    turn2 = post(proxy, {"model": "sim-reasoner", "input": step2, "tools": [WEATHER]})
    assert turn2.status_code == 200, turn2.text
    reasoning2, answer2 = turn2.json()["output"]
    assert answer2["content"][0]["text"] == "Tool results: get_weather=sunny"
    # next user turn: everything the model said before travels as references
    step3 = [*step2, {"type": "item_reference", "id": reasoning2["id"]},
             {"type": "item_reference", "id": answer2["id"]}, user("thanks")]
    with httpx.stream("POST", proxy.url + "/v1/responses", timeout=30,
                      headers={"authorization": "Bearer sk-test"},
                      json={"model": "sim-reasoner", "input": step3, "tools": [WEATHER],
                            "stream": True}) as answer:
        events = data_payloads(answer.read())
    check_stream(events)
    final = events[-1]["response"]
    assert final["output"][-1]["content"][0]["text"] == "You said: thanks"
    # the stored input holds the referenced items themselves, in place
    items = httpx.get(f"{proxy.url}/v1/responses/{final['id']}/input_items?order=asc&limit=100",
                      headers={"authorization": "Bearer sk-test"}, timeout=30).json()["data"]
    assert [i["id"] for i in items][4:6] == [reasoning2["id"], answer2["id"]]
    assert items[5]["content"][0]["text"] == "Tool results: get_weather=sunny"
    assert items[1] == reasoning1


def test_unknown_and_other_keys_references_are_400s_naming_the_item(
        proxy: ServerProcess) -> None:
    mine = post(proxy, {"model": "sim-model", "input": "hello"}, key="sk-mine").json()
    message_id = mine["output"][0]["id"]
    for key, ref in (("sk-mine", "msg_does_not_exist"), ("sk-someone-else", message_id)):
        answer = post(proxy, {"model": "sim-model", "input": [
            user("hi"), {"type": "item_reference", "id": ref}]}, key=key)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["param"] == "input[1].id" and error["type"] == "invalid_request_error"
        assert ref in error["message"]
    # an input item of a stored response can be referenced too, by its owner only
    request_item = httpx.get(f"{proxy.url}/v1/responses/{mine['id']}/input_items",
                             headers={"authorization": "Bearer sk-mine"},
                             timeout=30).json()["data"][0]
    again = post(proxy, {"model": "sim-model", "store": False, "input": [
        {"type": "item_reference", "id": request_item["id"]}]}, key="sk-mine")
    assert again.status_code == 200, again.text
    assert again.json()["output"][0]["content"][0]["text"] == "You said: hello"


def test_vercel_loop_through_the_sdk(openai_client: openai.OpenAI) -> None:
    first = openai_client.responses.create(model="sim-model", input="first question")
    answer_id = first.output[0].id
    second = openai_client.responses.create(model="sim-model", input=[
        {"role": "user", "content": "first question"},
        {"type": "item_reference", "id": answer_id},
        {"role": "user", "content": "second question"},
    ])
    assert second.output_text == "You said: second question"
    listed = openai_client.responses.input_items.list(second.id, order="asc")
    assert [item.id for item in listed.data][1] == answer_id
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model="sim-model", input=[
            {"type": "item_reference", "id": "rs_nowhere"}])
    assert caught.value.body["param"] == "input[0].id"  # type: ignore[index]


# -- input_tokens and truncation: the simulator's context is 32768 tokens -----------------------
def test_input_tokens_count_what_a_create_sends(openai_client: openai.OpenAI) -> None:
    body: dict[str, Any] = {
        "model": "sim-model", "instructions": "be brief",
        "input": [{"role": "developer", "content": "no jokes"},
                  {"role": "user", "content": "please call get_weather city=Rome"}],
        "tools": [WEATHER], "tool_choice": "none"}
    counted = openai_client.responses.input_tokens.count(**body)
    assert counted.object == "response.input_tokens"
    created = openai_client.responses.create(store=False, **body)
    assert created.usage is not None
    assert counted.input_tokens == created.usage.input_tokens > 0
    # history through previous_response_id counts too
    stored = openai_client.responses.create(model="sim-model", input="remember this")
    follow = {"model": "sim-model", "input": "and now?", "previous_response_id": stored.id}
    assert openai_client.responses.input_tokens.count(**follow).input_tokens == \
        openai_client.responses.create(**follow).usage.input_tokens  # type: ignore[union-attr]


def test_input_tokens_bad_bodies_are_400s(proxy: ServerProcess) -> None:
    url = proxy.url + "/v1/responses/input_tokens"
    for body, param in (({"input": "x"}, "model"), ({"model": "sim-model"}, "input"),
                        ({"model": "sim-model", "input": "x", "truncation": 3}, "truncation")):
        answer = httpx.post(url, json=body, timeout=30)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param
    unknown = httpx.post(url, json={"model": "nope", "input": "x"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def long_history() -> list[dict[str, Any]]:
    """About 45,000 simulator tokens: more than the 32,768 of the simulator's context."""
    history: list[dict[str, Any]] = []
    for n in range(9):
        history.append(user(f"question {n} " + "word " * 5000))
        history.append({"type": "function_call", "call_id": f"call_{n}", "name": "get_weather",
                        "arguments": "{\"city\": \"Paris\"}"})
        history.append({"type": "function_call_output", "call_id": f"call_{n}",
                        "output": "sunny " * 10})
    return [*history, user("the newest question")]


def test_truncation_auto_drops_the_oldest_items_until_it_fits(
        openai_client: openai.OpenAI, sim: SimControl) -> None:
    history = long_history()
    too_long = openai_client.responses.input_tokens.count(model="sim-model", input=history,
                                                   tools=[WEATHER])
    assert too_long.input_tokens > 32768
    events = streamed(openai_client, model="sim-model", input=history, tools=[WEATHER],
                      instructions="stay on topic", truncation="auto", max_output_tokens=50)
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["truncation"] == "auto"
    assert final["output"][0]["content"][0]["text"] == "You said: the newest question"
    assert final["usage"]["input_tokens"] <= 32768 - 50
    sent = sim.stats()["last_request"]["messages"]
    assert sent[0] == {"role": "system", "content": "stay on topic"}
    assert sent[-1]["content"] == "the newest question"
    assert 2 < len(sent) < 1 + len(history)
    calls = {c["id"] for m in sent for c in m.get("tool_calls") or ()}
    assert calls == {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    # the count endpoint counts the truncated prompt when asked to truncate
    fitted = openai_client.responses.input_tokens.count(model="sim-model", input=history,
                                                 tools=[WEATHER], instructions="stay on topic",
                                                 truncation="auto",
                                                 extra_body={"max_output_tokens": 50})
    assert fitted.input_tokens == final["usage"]["input_tokens"]


def test_truncation_disabled_is_openais_400(openai_client: openai.OpenAI) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            openai_client.responses.create(model="sim-model", input=long_history(), stream=stream)
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "context_length_exceeded" and error["param"] == "input"


def test_a_background_response_too_long_fails_with_the_context_code(
        openai_client: openai.OpenAI) -> None:
    job = openai_client.responses.create(model="sim-model", input=long_history(), background=True)
    final = job
    for _ in range(300):  # at most ~30 s on a loaded machine
        final = openai_client.responses.retrieve(job.id)
        if final.status not in ("queued", "in_progress"):
            break
        time.sleep(0.1)
    assert final.status == "failed"
    assert final.error is not None and final.error.code == "context_length_exceeded"
    check_stream([e.to_dict() for e in openai_client.responses.retrieve(job.id, stream=True)])


# -- one leading system message ---------------------------------------------------------------
def test_codex_shaped_request_reaches_the_model_with_one_leading_system(
        openai_client: openai.OpenAI, sim: SimControl) -> None:
    previous = openai_client.responses.create(model="sim-model", instructions="old rules",
                                       input=[{"role": "developer", "content": "dev one"},
                                              {"role": "user", "content": "first"}])
    answer = openai_client.responses.create(
        model="sim-model", instructions="You are a coding agent.",
        previous_response_id=previous.id,
        input=[{"type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": "sandbox: workspace-write"}]},
               {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "fix the bug"}]}])
    assert answer.output_text == "You said: fix the bug"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    # instructions are not inherited (OpenAI's rule); history's developer text comes in order
    assert sent[0]["content"] == "You are a coding agent.\n\ndev one\n\nsandbox: workspace-write"
