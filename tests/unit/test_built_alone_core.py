"""The core room's pieces are built alone, with fakes for what they are handed (the project's
"explicit dependencies" rule; one such test per room: test_built_alone_core.py, _store, _services,
_web). The event assembler takes its id factory and its clock: here two fakes, whose values the
events carry, and nothing else of the proxy."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.events.assembler import Assembler
from proxy.core.events.chatstream import ChatStreamReader
from tests.support.assembly import base_response
from tests.support.conformance import check_invariants, validate_with_sdk

FAKE_NOW = 1_800_000_000.75


class FakeIds:
    """Ids the test can tell apart from the proxy's own (`msg_fake1`, ...)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, prefix: str) -> str:
        self.asked.append(prefix)
        return f"{prefix}_fake{len(self.asked)}"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "sim-model", "choices": choices, **extra}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def test_the_assembler_runs_on_a_fake_clock_and_fake_ids() -> None:
    ids = FakeIds()
    assembler = Assembler(base_response(), ids=ids, clock=lambda: FAKE_NOW)
    reader = ChatStreamReader(assembler)
    raw = (chunk({"role": "assistant", "content": "Hello"}) + chunk({"content": " there"})
           + chunk({}, "stop")
           + chunk({}, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
           + b"data: [DONE]\n\n")
    events = [*assembler.start(), *reader.feed(raw), *reader.end()]

    validate_with_sdk(events)
    check_invariants(events)
    final = events[-1]["response"]
    assert [item["id"] for item in final["output"]] == ["msg_fake1"]  # the fake's id
    assert final["completed_at"] == int(FAKE_NOW)  # the fake's time
    assert final["output"][0]["content"][0]["text"] == "Hello there"
    assert ids.asked == ["msg"]
