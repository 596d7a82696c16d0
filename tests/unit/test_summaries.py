"""Reasoning summaries (`reasoning.summary` auto|concise|detailed): the reasoning text as a
`summary_text` part with the `response.reasoning_summary_*` events INSTEAD of a `reasoning_text`
content part (CONTRACT: a reasoning item shows each text once), live, rebuilt from a final
object (core/events/replay.py) and picked up from a log (Assembler.restore); every sequence
passes the SDK's types, its stream accumulator and the stream invariants."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.core.events.assembler import Assembler
from proxy.core.events.chatstream import ChatStreamReader
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from tests.support.assembly import CREATED_AT, GOLDEN, base_response, golden_bytes
from tests.support.conformance import check_stream
from tests.unit.test_assembler_properties import SETTINGS, encode, payloads, resplit

_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def summarised_base(mode: str | None = "auto") -> dict[str, Any]:
    return {**base_response(), "reasoning": {"effort": None, "summary": mode}}


def assemble(raw: bytes, base: dict[str, Any], cuts: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    assembler = Assembler(base, ids=counter_ids(), clock=lambda: CREATED_AT + 5)
    reader = ChatStreamReader(assembler)
    events = assembler.start()
    bounds = [0, *cuts, len(raw)]
    for start, end in itertools.pairwise(bounds):
        events += reader.feed(raw[start:end])
    return events + reader.end()


def accumulate_like_the_sdk(events: list[dict[str, Any]]) -> Any:
    """What `client.responses.stream()` does with each event; it raises on a bad order."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        if event["type"] != "response.cancelled":
            state.handle_event(_EVENT.validate_python(event))
    return state


def test_golden_reasoning_with_summary() -> None:
    events = assemble(golden_bytes("reasoning_then_text"), summarised_base())
    path = GOLDEN / "reasoning_summary.events.json"
    if os.environ.get("GOLDEN_REGEN") == "1":
        path.write_text(json.dumps(events, indent=1) + "\n")
    assert events == json.loads(path.read_text())
    check_stream(events)
    accumulate_like_the_sdk(events)


def test_summary_events_replace_the_reasoning_text_ones() -> None:
    events = assemble(golden_bytes("reasoning_then_text"), summarised_base("detailed"))
    kinds = [e["type"] for e in events]
    reasoning = kinds[kinds.index("response.output_item.added"):
                      kinds.index("response.output_item.done") + 1]
    deltas = kinds.count("response.reasoning_summary_text.delta")
    assert deltas >= 2
    assert "response.reasoning_text.delta" not in kinds
    assert reasoning == [
        "response.output_item.added", "response.reasoning_summary_part.added",
        *["response.reasoning_summary_text.delta"] * deltas,
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    item = events[-1]["response"]["output"][0]
    assert item["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    assert item["content"] == []  # the text once: llama-index showed content and summary both
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["summary"] == []


@pytest.mark.parametrize("mode", [None, "none"])
def test_no_summary_unless_asked(mode: str | None) -> None:
    events = assemble(golden_bytes("reasoning_then_text"), summarised_base(mode))
    assert not any("summary" in e["type"] for e in events)
    assert events[-1]["response"]["output"][0]["summary"] == []


def test_chunk_boundaries_do_not_change_the_summary() -> None:
    raw = golden_bytes("reasoning_then_text")
    whole = assemble(raw, summarised_base())
    for cut in range(1, len(raw), 7):
        assert assemble(raw, summarised_base(), (cut,)) == whole


def test_a_final_object_with_a_summary_replays_it() -> None:
    final = assemble(golden_bytes("reasoning_then_text"), summarised_base())[-1]["response"]
    replayed = events_from_response(final)
    check_stream(replayed)
    accumulate_like_the_sdk(replayed)
    kinds = [e["type"] for e in replayed]
    assert kinds[kinds.index("response.output_item.added") + 1:][:4] == [
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
    assert [e["item"] for e in replayed if e["type"] == "response.output_item.done"] == \
        final["output"]
    added = next(e for e in replayed if e["type"] == "response.output_item.added")
    assert added["item"]["summary"] == []


@pytest.mark.parametrize("ending", ["fail", "cancel"])
def test_every_prefix_of_a_summarised_log_restores_into_a_valid_stream(ending: str) -> None:
    live = assemble(golden_bytes("reasoning_then_text"), summarised_base())
    for cut in range(2, len(live)):
        prefix = live[:cut]
        assembler = Assembler(summarised_base(), ids=counter_ids(), clock=lambda: CREATED_AT)
        assembler.restore(prefix)
        stream = prefix + (assembler.fail("worker lost") if ending == "fail"
                           else assembler.cancel())
        check_stream(stream)
        accumulate_like_the_sdk(stream)
        output = stream[-1]["response"]["output"]
        summary_started = any(e["type"] == "response.reasoning_summary_part.added"
                              for e in prefix)
        if summary_started:
            reasoning = output[0]  # the text logged so far, once, in the summary
            assert reasoning["content"] == []
            assert reasoning["summary"][0]["text"] in ("", "Let me", "Let me think.")


@SETTINGS
@given(name=st.sampled_from(["reasoning_then_text", "reasoning_content_legacy", "text",
                             "tool_call"]), data=st.data())
def test_any_rechunking_keeps_the_text_once_in_the_summary(name: str,
                                                            data: st.DataObject) -> None:
    raw = encode(resplit(payloads(golden_bytes(name)), data))
    events = assemble(raw, summarised_base("auto"))
    plain = assemble(raw, summarised_base(None))
    check_stream(events)
    for item, unsummarised in zip(events[-1]["response"]["output"],
                                  plain[-1]["response"]["output"], strict=True):
        if item["type"] == "reasoning":
            assert item["content"] == []
            assert [s["text"] for s in item["summary"]] == \
                [c["text"] for c in unsummarised["content"]]
