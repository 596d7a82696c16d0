"""Recorded vLLM-format chunk streams give exactly the expected event lists.

The `.sse` files are byte streams as vLLM sends them; the `.events.json` files are the events we
promise for them. Regenerate after a deliberate change with `GOLDEN_REGEN=1 pytest <this file>`
and review the diff: it is the protocol.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.assembly import GOLDEN, assemble, golden_bytes
from tests.support.conformance import check_stream

CASES = ["text", "reasoning_then_text", "reasoning_content_legacy", "tool_call",
         "two_tool_calls", "length", "inband_error", "cut"]


@pytest.mark.parametrize("name", CASES)
def test_golden_stream(name: str) -> None:
    events = assemble(golden_bytes(name), connection_lost=(name == "cut"))
    expected_path = GOLDEN / f"{name}.events.json"
    if os.environ.get("GOLDEN_REGEN") == "1":
        expected_path.write_text(json.dumps(events, indent=1) + "\n")
    expected = json.loads(expected_path.read_text())
    assert events == expected
    check_stream(events)


def types(name: str, **kw: bool) -> list[str]:
    return [e["type"] for e in assemble(golden_bytes(name), **kw)]


def test_text_follows_the_canonical_order() -> None:
    assert types("text") == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 5,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]


def test_reasoning_is_its_own_item_before_the_message() -> None:
    for name in ("reasoning_then_text", "reasoning_content_legacy"):
        final = assemble(golden_bytes(name))[-1]["response"]
        assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
        assert final["output"][0]["content"][0]["type"] == "reasoning_text"
    final = assemble(golden_bytes("reasoning_then_text"))[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Let me think."
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 2


def test_two_tool_calls_are_sequential_items_after_the_text() -> None:
    final = assemble(golden_bytes("two_tool_calls"))[-1]
    assert final["type"] == "response.completed"
    output = final["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call", "function_call"]
    assert [o["name"] for o in output[1:]] == ["get_weather", "get_time"]
    assert [json.loads(o["arguments"]) for o in output[1:]] == [{"city": "Paris"}, {"tz": "CET"}]
    assert output[1]["call_id"] == "chatcmpl-tool-aaaa0000bbbb1111cccc2222dddd3333"


def test_length_is_incomplete_with_its_reason() -> None:
    events = assemble(golden_bytes("length"))
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["output_tokens"] == 3


@pytest.mark.parametrize(("name", "lost"), [("inband_error", False), ("cut", False),
                                            ("cut", True)])
def test_failures_close_open_items_and_fail(name: str, lost: bool) -> None:
    events = assemble(golden_bytes(name), connection_lost=lost)
    assert events[-1]["type"] == "response.failed"
    response = events[-1]["response"]
    assert response["error"]["code"] == "server_error"
    assert response["output"][0]["status"] == "incomplete"
    assert response["output"][0]["content"][0]["text"] in ("Partial answer", "Half a")


# -- a real vLLM 0.32's streams (tests/fixtures/vllm/real-0.32/) -----------------------------
REAL_032 = GOLDEN.parent.parent / "fixtures" / "vllm" / "real-0.32"
REAL_STREAMS = sorted(p.relative_to(REAL_032).as_posix() for p in REAL_032.rglob("*.sse")
                      if not p.name.startswith("bad_"))


@pytest.mark.parametrize("name", REAL_STREAMS)
def test_a_real_vllm_032_stream_gives_a_conformant_answer(name: str) -> None:
    events = assemble((REAL_032 / name).read_bytes())
    check_stream(events)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    # a call cut before any arguments (llama3_json's tools_auto_cut) sends no empty delta;
    # its done carries the empty arguments, as OpenAI's do
    assert not [e for e in events if e["type"] == "response.function_call_arguments.delta"
                and e["delta"] == ""]


def test_a_call_cut_before_its_arguments_has_a_done_and_no_delta() -> None:
    events = assemble((REAL_032 / "llama3_json" / "tools_auto_cut.sse").read_bytes())
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == "" and done["name"] == "get_weather"
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["output"][-1]["arguments"] == ""


def test_a_call_to_a_tool_never_offered_is_kept_as_what_the_model_did() -> None:
    # vLLM passes such a call through (OpenAI never returns one). Kept as a function_call item
    # under the model's name (docs/SIMULATOR.md "Calls to tools never offered"): the client
    # sees what the model did and can answer it with an error output; dropping it would leave
    # a turn that ended in `tool_calls` with no call, failing it would lose the answer.
    offered = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    raw = (REAL_032 / "tools_required.sse").read_bytes().replace(b'"get_weather"',
                                                                 b'"delete_everything"')
    events = assemble(raw, echo={"tools": offered})
    check_stream(events)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    [call] = final["output"]
    assert (call["type"], call["name"], call["status"]) == (
        "function_call", "delete_everything", "completed")
    assert call["arguments"] == '{"city": "Paris"}'
    assert call["call_id"].startswith("chatcmpl-tool-")
