"""Text through the proxy equals vLLM's own answer to the same chat request (temperature 0):
the text, the usage, the token counts of a chain (vLLM's /tokenize), structured output and
logprobs. The official SDK is the client; prompts and limits are tiny (two CPU cores)."""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest

from tests.e2e_vllm.fleet import Vllm
from tests.support.clients import streamed

pytestmark = pytest.mark.e2e_vllm

PROMPT = "Say hello in five words."


def reference_text(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"] or "")


def test_text_and_usage_equal_vllms_own_answer(client: openai.OpenAI, vllm: Vllm) -> None:
    expected = vllm.chat(messages=[{"role": "user", "content": PROMPT}], max_tokens=30)
    response = client.responses.create(model=vllm.model, input=PROMPT, max_output_tokens=30,
                                       temperature=0, store=False)
    assert response.status == "completed"
    assert response.output_text == reference_text(expected)
    assert response.usage is not None
    assert response.usage.input_tokens == expected["usage"]["prompt_tokens"]
    assert response.usage.output_tokens == expected["usage"]["completion_tokens"]
    assert response.usage.total_tokens == expected["usage"]["total_tokens"]


def test_streamed_text_equals_vllms_own_answer(client: openai.OpenAI, vllm: Vllm) -> None:
    instructions = "Answer in one short sentence."
    expected = vllm.chat(messages=[{"role": "system", "content": instructions},
                                   {"role": "user", "content": PROMPT}], max_tokens=30)
    events = streamed(client, model=vllm.model, input=PROMPT, instructions=instructions,
                      max_output_tokens=30, temperature=0, store=False)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]["response"]
    assert text == reference_text(expected)
    assert final["usage"]["input_tokens"] == expected["usage"]["prompt_tokens"]
    assert final["usage"]["output_tokens"] == expected["usage"]["completion_tokens"]


def test_a_cut_answer_is_incomplete_at_vllms_token_count(client: openai.OpenAI,
                                                         vllm: Vllm) -> None:
    expected = vllm.chat(messages=[{"role": "user", "content": "Count from 1 to 50."}],
                         max_tokens=5)
    assert expected["choices"][0]["finish_reason"] == "length"
    response = client.responses.create(model=vllm.model, input="Count from 1 to 50.",
                                       max_output_tokens=5, temperature=0, store=False)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == reference_text(expected)
    assert response.usage is not None and response.usage.output_tokens == 5


def test_chain_token_counts_are_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    first = client.responses.create(model=vllm.model, input="Name one color.",
                                    max_output_tokens=8, temperature=0)
    second = client.responses.create(model=vllm.model, input="Name another one.",
                                     previous_response_id=first.id, max_output_tokens=8,
                                     temperature=0)
    third = client.responses.create(model=vllm.model, input="And a third?",
                                    previous_response_id=second.id, max_output_tokens=8,
                                    temperature=0)
    history = [{"role": "user", "content": "Name one color."},
               {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "Name another one."}]
    assert second.usage is not None and second.usage.input_tokens == vllm.tokenize(history)
    history += [{"role": "assistant", "content": second.output_text},
                {"role": "user", "content": "And a third?"}]
    assert third.usage is not None and third.usage.input_tokens == vllm.tokenize(history)
    expected = vllm.chat(messages=history, max_tokens=8)
    assert third.output_text == reference_text(expected)
    assert third.usage.output_tokens == expected["usage"]["completion_tokens"]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "country": {"type": "string"}},
          "required": ["city", "country"], "additionalProperties": False}


def test_structured_output_equals_vllms_guided_answer(client: openai.OpenAI,
                                                      vllm: Vllm) -> None:
    prompt = "Give the capital of France as JSON."
    expected = vllm.chat(messages=[{"role": "user", "content": prompt}], max_tokens=40,
                         response_format={"type": "json_schema", "json_schema": {
                             "name": "capital", "schema": SCHEMA, "strict": True}})
    response = client.responses.create(
        model=vllm.model, input=prompt, max_output_tokens=40, temperature=0, store=False,
        text={"format": {"type": "json_schema", "name": "capital", "schema": SCHEMA,
                         "strict": True}})
    assert response.output_text == reference_text(expected)
    parsed = json.loads(response.output_text)
    assert set(parsed) == {"city", "country"}


def test_json_object_equals_vllms_answer(client: openai.OpenAI, vllm: Vllm) -> None:
    prompt = "Reply with a JSON object with a key named ok set to true."
    expected = vllm.chat(messages=[{"role": "user", "content": prompt}], max_tokens=20,
                         response_format={"type": "json_object"})
    response = client.responses.create(model=vllm.model, input=prompt, max_output_tokens=20,
                                       temperature=0, store=False,
                                       text={"format": {"type": "json_object"}})
    assert response.output_text == reference_text(expected)
    json.loads(response.output_text)


def test_logprobs_are_vllms(client: openai.OpenAI, vllm: Vllm) -> None:
    expected = vllm.chat(messages=[{"role": "user", "content": PROMPT}], max_tokens=6,
                         logprobs=True, top_logprobs=2)
    response = client.responses.create(model=vllm.model, input=PROMPT, max_output_tokens=6,
                                       temperature=0, store=False, top_logprobs=2,
                                       include=["message.output_text.logprobs"])
    part = response.to_dict()["output"][0]["content"][0]
    got = [(lp["token"], lp["logprob"], [t["token"] for t in lp["top_logprobs"]])
           for lp in part["logprobs"]]
    want = [(lp["token"], lp["logprob"], [t["token"] for t in lp["top_logprobs"]])
            for lp in expected["choices"][0]["logprobs"]["content"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[2] for g in got] == [w[2] for w in want]
    # Same engine, same prompt; a prefix served from vLLM's cache may round differently.
    assert all(math.isclose(g[1], w[1], abs_tol=0.05) for g, w in zip(got, want, strict=True))
