"""A real vLLM 0.32's 400s (tests/fixtures/vllm/real-0.32/bad_*.json) as a Responses client reads
them (core/translate/fleet_errors.py), and as a chat-completions client does (unchanged names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.core.errors import InvalidRequest, NotFound
from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from proxy.core.translate.fleet_errors import failure_code, for_responses
from proxy.upstream.client import error_from_upstream
from tests.support.assembly import CREATED_AT, base_response

REAL = Path(__file__).parent.parent / "fixtures" / "vllm" / "real-0.32"


def fleet_error(name: str) -> InvalidRequest | NotFound:
    status = int((REAL / f"{name}.headers").read_text().split()[1])
    body = (REAL / f"{name}.json").read_bytes()
    error = error_from_upstream(status, body, "http://127.0.0.1:8000")
    assert isinstance(error, InvalidRequest | NotFound)
    return error


# (capture, param, code, what the message starts with) as the Responses client gets them.
@pytest.mark.parametrize(("capture", "param", "code", "start"), [
    ("bad_max_tokens", "max_output_tokens", "integer_above_max_value",
     "max_output_tokens=100000 cannot be greater than max_model_len=4096."),
    ("bad_prompt_too_long", "input", "context_length_exceeded",
     "This model's maximum context length is 4096 tokens."),
    ("bad_top_logprobs", "top_logprobs", "integer_above_max_value",
     "Requested sample logprobs of 50, which is greater than max allowed: 20"),
    ("bad_auto_tool_choice_named_missing", "tool_choice", None,
     "The tool specified in `tool_choice` does not match any of the specified `tools`"),
])
def test_a_fleet_400_names_the_field_the_responses_client_sent(
        capture: str, param: str, code: str | None, start: str) -> None:
    error = for_responses(fleet_error(capture))
    assert isinstance(error, InvalidRequest) and error.status == 400
    assert (error.param, error.code) == (param, code)
    assert error.message.startswith(start)
    assert "(parameter=" not in error.message  # the trailer is dropped: `param` says it
    assert error.body()["error"]["type"] == "invalid_request_error"


def test_a_too_large_max_tokens_is_not_a_context_overflow_even_on_chat_completions() -> None:
    # pass-through keeps vLLM's own names (they are the client's), but the code is the cause's
    error = fleet_error("bad_max_tokens")
    assert (error.param, error.code) == ("max_tokens", None)
    assert error.message.endswith("(parameter=max_tokens, value=100000)")
    prompt = fleet_error("bad_prompt_too_long")
    assert (prompt.param, prompt.code) == ("input_tokens", "context_length_exceeded")


def test_a_name_the_responses_api_does_not_have_is_not_passed_on() -> None:
    error = for_responses(InvalidRequest("n must be 1 (parameter=n, value=2)", param="n"))
    assert error.param is None and error.message == "n must be 1"


def test_errors_that_are_not_a_fleet_400_are_left_alone() -> None:
    missing = fleet_error("bad_model")
    assert for_responses(missing) is missing
    assert (missing.param, missing.code) == ("model", "model_not_found")


def test_a_job_refused_for_max_output_tokens_fails_as_server_error_not_context() -> None:
    # the message still says `max_model_len`, which the assembler would take for an overflow
    error = for_responses(fleet_error("bad_max_tokens"))
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.start()
    failed = assembler.fail(error.message, failure_code(error))[-1]["response"]["error"]
    assert failed["code"] == "server_error"
    overflow = for_responses(fleet_error("bad_prompt_too_long"))
    assert failure_code(overflow) == "context_length_exceeded"


# vLLM 0.32 checks `top_logprobs` against --max-logprobs only once a streamed answer has begun:
# a 200 whose only frame is the 400's body (captured by `make e2e-vllm`, max-logprobs 5).
STREAMED = Path(__file__).parent.parent / "fixtures" / "vllm" / "e2e-0.32"


def first_frame(name: str) -> dict[str, object]:
    text = (STREAMED / f"{name}.sse").read_text()
    frame: dict[str, object] = json.loads(text.split("\n\n")[0].removeprefix("data: "))
    return frame


def test_a_400_sent_as_the_streams_first_frame_is_the_same_refusal() -> None:
    assert (STREAMED / "bad_top_logprobs_stream.headers").read_text().startswith(
        "HTTP/1.1 200")
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.start()
    events = assembler.feed(first_frame("bad_top_logprobs_stream"))
    refusal = assembler.refusal
    assert refusal is not None and refusal.status == 400
    assert refusal.param == "top_logprobs" and refusal.code == "integer_above_max_value"
    assert refusal.message == "Requested sample logprobs of 8, which is greater than max " \
                              "allowed: 5"
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": refusal.message}


def test_an_error_frame_after_output_is_a_failure_not_a_refusal() -> None:
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.start()
    assembler.feed({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    events = assembler.feed(first_frame("bad_top_logprobs_stream"))
    assert assembler.refusal is None
    assert events[-1]["response"]["error"]["message"].startswith("upstream error: ")
