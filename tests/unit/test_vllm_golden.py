"""Replays of real vLLM streams (tests/unit/golden/vllm/, described in docs/protocol.md, section 8):
the Responses items, their order and statuses, the terminal event and usage each one gives.

Each replay also passes the SDK's types and the stream invariants (`check_stream`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.assembly import GOLDEN, assemble
from tests.support.conformance import check_stream

VLLM = GOLDEN / "vllm"


def replay(name: str, **kw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = assemble((VLLM / f"{name}.sse").read_bytes(), **kw)
    check_stream(events)
    return events, events[-1]["response"]


def kinds(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def text_of(item: dict[str, Any]) -> str:
    return "".join(part["text"] for part in item["content"])


def usage(response: dict[str, Any]) -> tuple[int, int]:
    return response["usage"]["input_tokens"], response["usage"]["output_tokens"]


def test_every_shared_stream_has_a_replay_here() -> None:
    names = {path.stem for path in VLLM.glob("*.sse")}
    assert names == {"gptoss_harmony_v012", "harmony_mixed_delta", "hermes_qwen3_v010",
                     "midstream_error", "mistral_v11", "reasoning_v016",
                     "truncated_call_v010"}


def test_hermes_whitespace_beside_parallel_calls_opens_no_message() -> None:
    events, response = replay("hermes_qwen3_v010")
    assert events[-1]["type"] == "response.completed"
    assert kinds(response) == ["reasoning", "function_call", "function_call"]
    assert text_of(response["output"][0]) == "The user wants weather for Paris and Rome."
    calls = response["output"][1:]
    assert [c["call_id"] for c in calls] == ["chatcmpl-tool-3b8e2f6a9c1d4e7f8a0b2c4d6e8f0a1b",
                                             "chatcmpl-tool-5c7d9e1f2a3b4c5d6e7f8a9b0c1d2e3f"]
    assert [c["name"] for c in calls] == ["get_weather", "get_weather"]
    assert [c["arguments"] for c in calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
    assert [c["status"] for c in calls] == ["completed", "completed"]
    assert not [e for e in events if e["type"].startswith("response.output_text")]
    assert usage(response) == (312, 89)


def test_truncated_call_reported_as_tool_calls_ends_incomplete() -> None:
    events, response = replay("truncated_call_v010", echo={"max_output_tokens": 16})
    assert events[-1]["type"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    (call,) = response["output"]
    assert call["type"] == "function_call" and call["status"] == "incomplete"
    assert call["arguments"] == '{"command": "rm -rf /tmp/bu"}'
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["status"] for e in done] == ["incomplete"]
    assert usage(response) == (200, 16)


def test_the_same_call_under_a_higher_limit_is_whole() -> None:
    events, response = replay("truncated_call_v010", echo={"max_output_tokens": 17})
    assert events[-1]["type"] == "response.completed"
    assert response["output"][0]["status"] == "completed"


def cut_stream(finish: str) -> bytes:
    """The truncated stream with its JSON left cut (no limit known to the assembler)."""
    raw = (VLLM / "truncated_call_v010.sse").read_text()
    raw = raw.replace('{"arguments":"\\"}"}', '{"arguments":""}')
    return raw.replace('"finish_reason":"tool_calls"', f'"finish_reason":"{finish}"').encode()


@pytest.mark.parametrize("finish", ["tool_calls", "length"])
def test_a_call_whose_arguments_do_not_parse_is_cut(finish: str) -> None:
    events = assemble(cut_stream(finish))
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["output"][0]["arguments"] == '{"command": "rm -rf /tmp/bu'


def test_gptoss_both_reasoning_fields_and_null_reasoning_content() -> None:
    events, response = replay("gptoss_harmony_v012")
    assert events[-1]["type"] == "response.completed"
    assert kinds(response) == ["reasoning", "function_call"]
    assert text_of(response["output"][0]) == "User asks weather in Paris. Call get_weather."
    call = response["output"][1]
    assert (call["call_id"], call["name"], call["arguments"], call["status"]) == (
        "chatcmpl-tool-9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d", "get_weather", '{"city":"Paris"}',
        "completed")
    assert usage(response) == (148, 42)


def test_harmony_mixed_delta_keeps_reasoning_before_content() -> None:
    events, response = replay("harmony_mixed_delta")
    assert [(item["type"], text_of(item)) for item in response["output"]] == [
        ("reasoning", "need tool"), ("message", "Checking. Done.")]
    assert (events[-1]["type"], response["usage"]) == ("response.completed", None)


def test_reasoning_v016_whitespace_before_text_stays_in_the_message() -> None:
    events, response = replay("reasoning_v016")
    assert events[-1]["type"] == "response.completed"
    assert kinds(response) == ["reasoning", "message"]
    assert text_of(response["output"][0]) == "Okay, the user says hi."
    assert text_of(response["output"][1]) == "\n\nHello!"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["\n\nHello", "!"]
    assert usage(response) == (9, 31)
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 26


def test_midstream_error_fails_with_the_partial_message_incomplete() -> None:
    events, response = replay("midstream_error")
    assert events[-1]["type"] == "response.failed"
    assert response["error"]["message"] == "upstream error: Internal server error"
    assert kinds(response) == ["message"]
    assert response["output"][0]["status"] == "incomplete"
    assert text_of(response["output"][0]) == "Hel"
    assert response["usage"] is None


def test_mistral_short_ids_and_null_id_fragments_make_one_call() -> None:
    events, response = replay("mistral_v11")
    assert events[-1]["type"] == "response.completed"
    (call,) = response["output"]
    assert (call["call_id"], call["name"], call["arguments"], call["status"]) == (
        "Xk3pQ9wLm", "get_weather", '{"city": "Paris"}', "completed")
    assert usage(response) == (421, 15)


def test_the_replays_do_not_change_when_bytes_split_anywhere() -> None:
    for path in sorted(VLLM.glob("*.sse")):
        raw = path.read_bytes()
        whole = assemble(raw, echo={"max_output_tokens": 16})
        for cut in range(1, len(raw), 97):
            assert assemble(raw, [cut], echo={"max_output_tokens": 16}) == whole, path.name


def sse(*deltas: dict[str, Any], finish: str, usage_chunk: dict[str, Any] | None = None) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage_chunk:
        chunks.append({"choices": [], "usage": usage_chunk})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + \
        b"data: [DONE]\n\n"


CALL = {"tool_calls": [{"id": "call_1", "type": "function", "index": 0,
                        "function": {"name": "f", "arguments": "{}"}}]}


def test_whitespace_after_the_last_call_is_dropped() -> None:
    events = assemble(sse(CALL, {"content": "\n"}, {"content": " "}, finish="tool_calls"))
    check_stream(events)
    assert kinds(events[-1]["response"]) == ["function_call"]


def test_text_after_a_call_keeps_the_whitespace_before_it() -> None:
    events = assemble(sse(CALL, {"content": "\n"}, {"content": "Done"}, finish="stop"))
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert kinds(events[-1]["response"]) == ["function_call", "message"]
    assert text_of(output[1]) == "\nDone"


def test_a_turn_of_only_whitespace_is_still_its_answer() -> None:
    events = assemble(sse({"reasoning": "hm"}, {"content": "\n\n"}, finish="stop"))
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert kinds(events[-1]["response"]) == ["reasoning", "message"]
    assert text_of(output[1]) == "\n\n"


def test_abort_fails_and_the_open_call_is_not_completed() -> None:
    events = assemble(sse(CALL, finish="abort"))
    check_stream(events)
    response = events[-1]["response"]
    assert events[-1]["type"] == "response.failed"
    assert response["error"]["message"] == "upstream aborted the request"
    assert response["output"][0]["status"] == "incomplete"


def test_repetition_ends_incomplete() -> None:
    events = assemble(sse({"content": "la la la"}, finish="repetition"))
    check_stream(events)
    response = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": None}
    assert response["output"][0]["status"] == "incomplete"


# -- usage details as each version sends them ---------------------------------------------------
@pytest.mark.parametrize(("name", "fragments"), [("hermes_qwen3_v010", 2),
                                                 ("gptoss_harmony_v012", 2)])
def test_reasoning_tokens_are_counted_when_vllm_reports_none(name: str, fragments: int) -> None:
    # Before 2026 builds vLLM's usage has no completion_tokens_details: the reasoning the turn
    # streamed (one fragment per decoded token) stands in, rather than claiming 0.
    _, response = replay(name)
    details = response["usage"]["output_tokens_details"]
    assert details == {"reasoning_tokens": fragments}


def test_reported_reasoning_tokens_win_over_the_count() -> None:
    _, response = replay("reasoning_v016")  # 2026: reports 26, streams 3 fragments
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 26


def test_no_reasoning_counts_zero_and_cached_tokens_come_only_when_sent() -> None:
    _, mistral = replay("mistral_v11")  # no prompt_tokens_details: no cache figure to pass on
    assert mistral["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}
    assert mistral["usage"]["input_tokens_details"]["cached_tokens"] == 0
