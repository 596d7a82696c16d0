"""vLLM's refusals through the proxy name what the client sent: `max_output_tokens`, `input`,
`top_logprobs` (vLLM 0.32 names its own chat fields: `max_tokens`, `input_tokens`,
`logprobs`), with a code that matches the cause. Each case first asks vLLM itself, so the
comparison holds for any fleet (E2E_VLLM_URL) too."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e_vllm.fleet import MAX_MODEL_LEN, Vllm
from tests.support.clients import streamed

pytestmark = pytest.mark.e2e_vllm


def refused(client: openai.OpenAI, stream: bool, **body: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        if stream:
            for _ in client.responses.create(stream=True, **body):
                pass
        else:
            client.responses.create(**body)
    return info.value


def error_of(exc: openai.BadRequestError) -> dict[str, Any]:
    body = exc.body if isinstance(exc.body, dict) else {}
    error: dict[str, Any] = body.get("error", body)
    return error


@pytest.mark.parametrize("stream", [False, True])
def test_too_many_output_tokens_names_max_output_tokens(client: openai.OpenAI, vllm: Vllm,
                                                        stream: bool) -> None:
    status, own = vllm.chat_error(messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=100_000)
    assert status == 400, own
    exc = refused(client, stream, model=vllm.model, input="hi", max_output_tokens=100_000,
                  store=False)
    error = error_of(exc)
    assert exc.param == "max_output_tokens", error
    assert error.get("code") != "context_length_exceeded"  # the prompt was 2 tokens
    assert "max_tokens" not in error["message"] and "(parameter=" not in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_past_the_context_names_input(client: openai.OpenAI, vllm: Vllm,
                                               stream: bool) -> None:
    prompt = "hello " * (MAX_MODEL_LEN + 200)
    status, own = vllm.chat_error(messages=[{"role": "user", "content": prompt}], max_tokens=5)
    assert status == 400, own
    exc = refused(client, stream, model=vllm.model, input=prompt, max_output_tokens=5,
                  store=False)
    error = error_of(exc)
    assert exc.param == "input", error
    assert error.get("code") == "context_length_exceeded"
    assert "input_tokens" not in error["message"] and "(parameter=" not in error["message"]


def test_more_top_logprobs_than_the_fleet_allows_names_top_logprobs(client: openai.OpenAI,
                                                                    vllm: Vllm) -> None:
    # Our vLLM runs with --max-logprobs 5 (fleet.py), under the proxy's own bound (20): the
    # refusal comes from vLLM. An existing fleet that takes 8 must answer through the proxy.
    status, own = vllm.chat_error(messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                  logprobs=True, top_logprobs=8)
    body = {"model": vllm.model, "input": "hi", "max_output_tokens": 2, "temperature": 0,
            "top_logprobs": 8, "include": ["message.output_text.logprobs"], "store": False}
    if vllm.parser is not None:
        assert status == 400, own
    if status == 400:
        exc = refused(client, False, **body)
        assert exc.param == "top_logprobs", error_of(exc)
        assert "(parameter=" not in error_of(exc)["message"]
        # vLLM 0.32 refuses it after a 200, as the stream's first frame: a streamed create
        # has begun by then, and ends failed with the same words.
        events = streamed(client, **body)
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["message"] == error_of(exc)["message"]
    else:
        assert client.responses.create(**body).status in {"completed", "incomplete"}


def test_an_unknown_model_is_a_404_naming_model(client: openai.OpenAI, vllm: Vllm) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="no-such-model", input="hi", max_output_tokens=2,
                                store=False)
    assert info.value.param in {"model", None}
