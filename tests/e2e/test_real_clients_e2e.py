"""Issue 11 through the official `openai` SDK and raw HTTP against a real proxy process and the
simulator: reasoning summaries, `item_reference` inputs (the Vercel AI SDK's multi-turn loop),
`truncation: "auto"` and `POST /v1/responses/input_tokens`. Every stream passes
`check_stream` (the SDK's types, the invariants, vLLM's rules, the summary parts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(proxy: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def streamed(client: openai.OpenAI, **body: Any) -> list[dict[str, Any]]:
    events = [event.to_dict() for event in client.responses.create(stream=True, **body)]
    check_stream(events)
    return events


# -- reasoning summaries ------------------------------------------------------------------------
def test_summary_streams_through_the_sdk_stream_helper(client: openai.OpenAI) -> None:
    summary: list[str] = []
    raw: list[str] = []
    with client.responses.stream(model="sim-reasoner", input="why is the sky blue",
                                 reasoning={"effort": "low", "summary": "auto"}) as stream:
        for event in stream:
            if event.type == "response.reasoning_summary_text.delta":
                summary.append(event.delta)
            elif event.type == "response.reasoning_text.delta":
                raw.append(event.delta)
        final = stream.get_final_response()
    assert summary and "".join(summary) == "".join(raw)
    reasoning = final.output[0]
    assert reasoning.type == "reasoning"
    assert [(s.type, s.text) for s in reasoning.summary] == [("summary_text", "".join(raw))]
    # a stored response replays its summary events too, from its log, identically
    replayed = [e.to_dict() for e in client.responses.retrieve(final.id, stream=True)]
    check_stream(replayed)
    assert [e["type"] for e in replayed].count("response.reasoning_summary_text.delta") == \
        len(summary)


def test_summary_in_a_non_streamed_and_a_raw_streamed_response(client: openai.OpenAI,
                                                               proxy: ServerProcess) -> None:
    response = client.responses.create(model="sim-reasoner", input="think", store=False,
                                       reasoning={"summary": "detailed"})
    reasoning = response.output[0]
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.summary[0].text == reasoning.content[0].text != ""
    with httpx.stream("POST", proxy.url + "/v1/responses", timeout=30, json={
            "model": "sim-reasoner", "input": "think", "stream": True,
            "reasoning": {"summary": "concise"}}) as answer:
        events = data_payloads(answer.read())
    check_stream(events)
    assert "response.reasoning_summary_part.added" in [e["type"] for e in events]
    # no summary asked: none sent
    plain = streamed(client, model="sim-reasoner", input="think", store=False)
    assert not any("summary" in e["type"] for e in plain)
