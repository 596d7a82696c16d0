"""`truncation: "auto"` (core/translate/truncation.py) and "context too long" recognised wherever
the
upstream says it: a 400 before the stream, a failure mid-stream."""

from __future__ import annotations

import orjson
import pytest
from openai._models import construct_type
from openai.types.responses import ResponseFailedEvent, ResponseStreamEvent

from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.translate.truncation import is_context_overflow, shorten, units
from proxy.upstream.client import error_from_upstream
from tests.support.assembly import CREATED_AT, base_response
from tests.support.conformance import check_stream

SYSTEM = {"role": "system", "content": "rules"}


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def call(call_id: str) -> dict[str, object]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def output(call_id: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "content": "x " * 50}


HISTORY = [SYSTEM, user("old " * 100), call("c1"), output("c1"), user("mid " * 100),
           {"role": "assistant", "content": "reply " * 100}, call("c2"), output("c2"),
           output("c2"), user("newest question")]


def test_units_keep_a_call_with_its_outputs_and_the_system_apart() -> None:
    head, groups = units(HISTORY)
    assert head == [SYSTEM]
    assert [len(g) for g in groups] == [1, 2, 1, 1, 3, 1]
    assert groups[4] == [call("c2"), output("c2"), output("c2")]


@pytest.mark.parametrize("budget", [10, 100, 200, 300, 400, 10_000])
def test_shorten_drops_oldest_units_only(budget: int) -> None:
    count = 3 + sum(4 + len(str(m.get("content") or "").split()) for m in HISTORY)
    kept = shorten(HISTORY, None, count, budget)
    assert kept[0] == SYSTEM and kept[-1] == user("newest question")
    assert kept == [SYSTEM, *HISTORY[len(HISTORY) - len(kept) + 1:]]  # a suffix, plus system
    calls = {c["id"] for m in kept for c in m.get("tool_calls") or ()}  # type: ignore[attr-defined]
    answered = {m["tool_call_id"] for m in kept if m["role"] == "tool"}
    assert calls == answered  # never a call without its output, nor an output alone
    if budget >= count:
        assert kept is HISTORY


def test_the_estimate_follows_the_serialized_size() -> None:
    size = len(orjson.dumps(HISTORY))
    kept = shorten(HISTORY, None, size, size // 2)  # one token per byte: drop about half
    assert len(orjson.dumps(kept)) <= size // 2 + len(orjson.dumps([SYSTEM])) + 2


def test_nothing_to_drop_gives_the_same_list() -> None:
    lone = [SYSTEM, user("too long " * 1000)]
    assert shorten(lone, None, 5000, 10) is lone


@pytest.mark.parametrize(("message", "overflow"), [
    ("This model's maximum context length is 32768 tokens. However, you requested 40000 "
     "tokens (40000 in the messages, 0 in the completion).", True),
    ("The decoder prompt (length 9000) is longer than the maximum model length of 8192.", True),
    ("'max_tokens' is too large: 100. This model's maximum context length is 32 tokens", True),
    ("Simulated HTTP 400 (fail=http:400).", False),
])
def test_vllm_context_messages_are_recognised(message: str, overflow: bool) -> None:
    assert is_context_overflow(message) is overflow
    error = error_from_upstream(400, orjson.dumps({"error": {
        "message": message, "type": "BadRequestError", "param": None, "code": 400}}), "u")
    assert isinstance(error, InvalidRequest) and error.status == 400
    assert error.code == ("context_length_exceeded" if overflow else None)
    if overflow:
        assert error.param == "input"


def test_a_context_error_mid_stream_fails_with_its_code() -> None:
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    events = assembler.start()
    events += assembler.feed({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    events += assembler.feed({"error": {
        "message": "This model's maximum context length is 100 tokens.", "code": 400}})
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "context_length_exceeded"
    other = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    other.start()
    assert other.fail("upstream error: boom")[-1]["response"]["error"]["code"] == "server_error"


def test_truncation_is_parsed_and_echoed() -> None:
    auto = parse_request({"model": "m", "input": "x", "truncation": "auto"}, counter_ids())
    assert auto.truncation == "auto" and auto.echo()["truncation"] == "auto"
    plain = parse_request({"model": "m", "input": "x"}, counter_ids())
    assert plain.echo()["truncation"] == "disabled"
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"model": "m", "input": "x", "truncation": "middle"}, counter_ids())
    assert caught.value.param == "truncation"


def test_the_sdk_keeps_the_context_code_on_a_failed_event() -> None:
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.start()
    failed = assembler.fail("upstream error: This model's maximum context length is 9 tokens.")
    parsed = construct_type(type_=ResponseStreamEvent, value=failed[-1])
    assert isinstance(parsed, ResponseFailedEvent)
    assert parsed.response.error is not None
    assert parsed.response.error.code == "context_length_exceeded"
