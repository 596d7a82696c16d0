"""core/events/steer.py: a `response.steer` frame checked, the stubs of what a response waits
for, and the three answers, each in the `openai` package's shapes."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses.response_steer_required_input import ResponseSteerRequiredInput
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from proxy.core.events import steer as st

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)
STUB: TypeAdapter[Any] = TypeAdapter(ResponseSteerRequiredInput)
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def parse(frame: dict[str, Any]) -> st.SteerInput:
    return st.parse_steer(frame, max_items=10)


def refused(frame: dict[str, Any]) -> str:
    with pytest.raises(st.SteerRefused) as caught:
        parse(frame)
    assert caught.value.code == st.INVALID
    return caught.value.message


def test_a_string_steer_is_one_user_message() -> None:
    checked = parse({"previous_response_id": "resp_1", "input": "turn left"})
    assert checked.previous_response_id == "resp_1"
    assert checked.sent == "turn left"
    assert checked.messages == [{"type": "message", "role": "user", "content": "turn left"}]


def test_user_messages_with_text_image_and_file_parts_are_accepted() -> None:
    sent = [{"role": "user", "content": "first"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": IMAGE},
                {"type": "input_file", "file_id": "file_abc"}]}]
    checked = parse({"previous_response_id": "resp_1", "input": sent})
    assert checked.sent is sent
    assert [m["type"] for m in checked.messages] == ["message", "message"]
    assert checked.messages[1]["content"] == sent[1]["content"]
    # What a later failure returns: the package's item shape, `type` included.
    assert checked.returned == checked.messages
    assert parse({"previous_response_id": "r", "input": "x"}).returned == "x"


@pytest.mark.parametrize(("frame", "names"), [
    ({"previous_response_id": "resp_1", "input": "x", "stream_id": "a"}, "stream_id"),
    ({"previous_response_id": "resp_1", "input": "x", "model": "m"}, "model"),
    ({"input": "x"}, "previous_response_id"),
    ({"previous_response_id": 7, "input": "x"}, "previous_response_id"),
    ({"previous_response_id": "resp_1", "input": ""}, "input"),
    ({"previous_response_id": "resp_1", "input": []}, "input"),
    ({"previous_response_id": "resp_1"}, "input"),
    ({"previous_response_id": "resp_1", "input": [{"role": "developer", "content": "x"}]},
     "input[0]"),
    ({"previous_response_id": "resp_1", "input": [{"role": "assistant", "content": "x"}]},
     "input[0]"),
    ({"previous_response_id": "resp_1",
      "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input[0]"),
    ({"previous_response_id": "resp_1",
      "input": [{"role": "user", "content": "x", "name": "n"}]}, "input[0].name"),
    ({"previous_response_id": "resp_1", "input": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]},
     "input[0].content[0].type"),
    # Parts are checked as a create's are: an image needs its URL.
    ({"previous_response_id": "resp_1", "input": [{"role": "user", "content": [
        {"type": "input_image"}]}]}, "input[0].content[0]"),
    ({"previous_response_id": "resp_1", "input": [{"role": "user", "content": "x"}] * 11},
     "input"),
])
def test_what_a_steer_may_not_carry_is_invalid_input_naming_it(frame: dict[str, Any],
                                                               names: str) -> None:
    assert names in refused(frame)


def test_a_failure_returns_the_input_as_sent_when_the_package_can_hold_it() -> None:
    sent = [{"type": "function_call_output", "call_id": "c", "output": "x"}]
    assert st.returned_input({"input": sent}) is sent
    assert st.returned_input({"input": "text"}) == "text"
    assert st.returned_input({"input": 5}) == ""
    assert st.target_of({"previous_response_id": 5}) == ""


def test_required_input_names_each_client_owned_item_in_output_order() -> None:
    output = [
        {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": "{}"},
        {"type": "mcp_call", "id": "mcp_1", "name": "x", "server_label": "s", "arguments": "{}"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "patch",
         "input": ""},
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "x", "server_label": "s",
         "arguments": "{}"},
    ]
    stubs = st.required_input(output)
    assert stubs == [
        {"type": "function_call_output", "call_id": "call_1", "name": "get_weather"},
        {"type": "custom_tool_call_output", "call_id": "call_2"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1"},
    ]
    for stub in stubs:
        STUB.validate_python(stub, strict=True)


def test_queued_input_goes_before_the_creates_own() -> None:
    queued = [{"type": "message", "role": "user", "content": "a"},
              {"type": "message", "role": "user", "content": "b"}]
    output = {"type": "function_call_output", "call_id": "c", "output": "4"}
    assert st.with_input_first({"input": [output]}, queued)["input"] == [*queued, output]
    assert st.with_input_first({"input": "mine"}, queued)["input"] == [
        *queued, {"type": "message", "role": "user", "content": "mine"}]
    assert st.with_input_first({}, queued)["input"] == queued
    assert st.with_input_first({"input": 5}, queued) == {"input": 5}  # the create refuses it


def test_the_successor_keeps_the_settings_and_continues_from_the_steered_response() -> None:
    body = {"model": "m", "instructions": "be brief", "tools": [{"type": "function"}],
            "store": False, "stream_id": "lane-1", "input": "old",
            "previous_response_id": "resp_0"}
    queued = [{"type": "message", "role": "user", "content": "new"}]
    successor = st.successor_body(body, "resp_1", queued)
    assert successor == {**body, "previous_response_id": "resp_1", "input": queued}


@pytest.mark.parametrize("lane", [None, "lane-1"])
def test_the_three_answers_are_the_packages_server_events(lane: str | None) -> None:
    stubs = [{"type": "function_call_output", "call_id": "call_1", "name": "f"}]
    events = [
        st.accepted("steer_1", "resp_1", 0, lane),
        st.pending("steer_1", "resp_1", stubs, 1, lane),
        st.failed(st.SUCCESSOR_FAILED, "no", "resp_1", "text", 2, steer_id="steer_1",
                  stream_id=lane),
        st.failed(st.NOT_FOUND, "no", "resp_x",
                  [{"type": "message", "role": "user", "content": "x"}], 3, stream_id=lane),
    ]
    for event in events:
        parsed = SERVER_EVENT.validate_python(event, strict=True)
        assert parsed.type == event["type"]
        assert parsed.stream_id == lane
    assert events[2]["steer"]["id"] == "steer_1"
    assert "id" not in events[3]["steer"]  # refused before an id was given
    assert events[1]["reason"] == "waiting_for_required_input"
