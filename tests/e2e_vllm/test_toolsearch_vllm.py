"""Tool search on a real vLLM (hermes parser): the model, forced to call a tool while only the
search function is offered, searches; the response shows the search's call and output items,
every event validated against the SDK's types, and the next turn ran on the fleet with what
was found."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e_vllm.compare import ASK, WEATHER
from tests.e2e_vllm.fleet import Vllm
from tests.support.clients import streamed
from tests.support.conformance import check_stream

pytestmark = pytest.mark.e2e_vllm


def test_a_forced_search_over_deferred_tools_runs_between_two_fleet_turns(
        client: openai.OpenAI, vllm: Vllm) -> None:
    tools: list[dict[str, Any]] = [{**WEATHER, "defer_loading": True}]
    tools += [{"type": "function", "name": f"inventory_count_{i}", "defer_loading": True,
               "description": f"Count the stock of warehouse {i}."} for i in range(40)]
    tools.append({"type": "tool_search"})
    events = streamed(client, model=vllm.model, input=ASK, tools=tools, tool_choice="required",
                      max_output_tokens=60, temperature=0, store=False)
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output[:2]] == ["tool_search_call", "tool_search_output"]
    assert output[0]["execution"] == "server" and output[0]["status"] == "completed"
    assert output[1]["call_id"] == output[0]["call_id"]
    assert len(output) > 2  # the fleet's second turn, with the tools found offered
