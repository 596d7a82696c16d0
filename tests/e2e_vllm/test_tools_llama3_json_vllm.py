"""The same tool turns against vLLM's `llama3_json` parser (a second vLLM, started after the
hermes tests): required, named and auto calls equal to vLLM's own answer, and none of the
parser's extra empty argument fragments (it ends `tool_calls` on one) reaches the client."""

from __future__ import annotations

import openai
import pytest

from tests.e2e_vllm.compare import assert_same_turn, tool_turn
from tests.e2e_vllm.fleet import Fleet, Vllm

pytestmark = [pytest.mark.e2e_vllm, pytest.mark.llama3_json]


@pytest.fixture(scope="module")
def vllm(vllm_fleet: Fleet) -> Vllm:
    """vLLM with `--tool-call-parser llama3_json` (the hermes one is stopped first)."""
    return vllm_fleet.get("llama3_json")


@pytest.mark.parametrize("choice", ["required", "auto",
                                    {"type": "function", "name": "get_weather"}],
                         ids=["required", "auto", "named"])
def test_calls_equal_vllms(client: openai.OpenAI, vllm: Vllm,
                           choice: str | dict[str, str]) -> None:
    events, expected = tool_turn(client, vllm, choice, max_tokens=40)
    if vllm.parser == "llama3_json":  # this model answers each of them with a call
        assert expected["choices"][0]["message"]["tool_calls"]
    assert_same_turn(events, expected)
