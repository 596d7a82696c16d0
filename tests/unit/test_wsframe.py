"""core/events/wsframe.py: client frames of WebSocket mode and the envelope of what the server
sends (a lane's `stream_id`, the `error` event), and services/responses/localchains.py's bound."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses.responses_server_event import ResponseWsError

from proxy.core.errors import InvalidRequest, PayloadTooLarge, ProxyError, RateLimited
from proxy.core.events.wsframe import (
    CREATE,
    MAX_STREAM_ID,
    create_body,
    error_frame,
    frame_over,
    parse_frame,
    stream_tag,
    tagged,
    take_stream_id,
)
from proxy.services.responses.localchains import LocalChains
from tests.support.conformance import validate_ws_frames


def test_create_frame_gives_the_body_without_type_and_stream() -> None:
    kind, frame = parse_frame(b'{"type": "response.create", "model": "m", "stream": true,'
                              b' "background": false, "stream_id": "lane-1"}')
    assert kind == CREATE
    assert take_stream_id(frame) == "lane-1"
    assert create_body(frame) == {"model": "m"}


def test_other_frame_types_are_returned_not_refused() -> None:
    assert parse_frame('{"type": "response.append", "x": 1}') == ("response.append", {"x": 1})


@pytest.mark.parametrize("data, param", [
    (b"{", None), (b"3", "type"), (b'{"type": 3}', "type"), (b"{}", "type"),
    (b'{"type": "response.create", "background": true}', "background"),
    (b'{"type": "response.create", "stream_id": 7}', "stream_id"),
    (b'{"type": "response.create", "stream_id": ""}', "stream_id"),
    (b'{"type": "response.create", "stream_id": "' + b"s" * (MAX_STREAM_ID + 1) + b'"}',
     "stream_id"),
])
def test_bad_frames_raise_naming_the_parameter(data: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as raised:
        _kind, frame = parse_frame(data)
        take_stream_id(frame)
        create_body(frame)
    assert raised.value.param == param
    assert raised.value.status == 400


def test_a_create_without_stream_id_is_the_unnamed_lane() -> None:
    for frame in ({"model": "m"}, {"model": "m", "stream_id": None}):
        assert take_stream_id(frame) is None
        assert frame == {"model": "m"}


@pytest.mark.parametrize("stream_id", ["a", "lane \"quoted\" \\ é 😀", "s" * MAX_STREAM_ID])
def test_tagged_splices_the_stream_id_into_the_encoded_event(stream_id: str) -> None:
    event = {"type": "response.output_text.delta", "sequence_number": 4, "delta": "}",
             "logprobs": [], "item_id": "msg_1", "output_index": 0, "content_index": 0}
    data = orjson.dumps(event)
    out = tagged(data, stream_tag(stream_id))
    assert orjson.loads(out) == {**event, "stream_id": stream_id}
    assert out.startswith(data[:-1])  # the service's bytes, the field after them


@pytest.mark.parametrize("error", [
    InvalidRequest("bad", param="input[0].content"),
    InvalidRequest("busy", code="response_in_progress"),
    PayloadTooLarge("The frame is larger than the maximum request size.", code="frame_too_large"),
    RateLimited("slow down", retry_after=1),
    ProxyError("The server had an error while processing your request."),
    ProxyError("The WebSocket connection reached its maximum age; open a new one.",
               code="websocket_connection_limit_reached", status=400),
])
@pytest.mark.parametrize("stream_id", [None, "lane-7"])
def test_error_frames_are_the_packages_websocket_error_event(error: ProxyError,
                                                             stream_id: str | None) -> None:
    frame = orjson.loads(error_frame(error, stream_id))
    validate_ws_frames([frame])
    event = ResponseWsError.model_validate(frame, strict=True)
    assert event.status == error.status
    assert (event.error.code, event.error.message, event.error.param, event.error.type) == (
        error.code, error.message, error.param, error.type)
    assert event.stream_id == stream_id
    assert ("stream_id" in frame) is (stream_id is not None)


def _final(response_id: str, status: str = "completed") -> dict[str, object]:
    return {"id": response_id, "status": status, "model": "m",
            "output": [{"type": "message", "role": "assistant", "content": []}]}


def test_local_chains_keep_the_last_ones_and_extend_the_history() -> None:
    local = LocalChains(kept=2)
    user = {"type": "message", "role": "user", "content": "hi"}
    local.remember(_final("resp_1"), [], (), [user], "http://r1")
    chain = local.get("resp_1")
    assert chain is not None
    assert chain.items == [user, _final("resp_1")["output"][0]]  # type: ignore[index]
    assert chain.parents == ("resp_1",)
    assert chain.replica == "http://r1"
    local.remember(_final("resp_2"), chain.items, chain.parents, [user], None)
    second = local.get("resp_2")
    assert second is not None and second.parents == ("resp_1", "resp_2")
    assert len(second.items) == 4
    local.remember(_final("resp_3"), [], (), [], None)
    assert local.get("resp_1") is None and len(local) == 2
    local.remember(_final("resp_4", "failed"), [], (), [], None)
    assert local.get("resp_4") is None
    local.evict("resp_3")
    assert local.get("resp_3") is None


@pytest.mark.parametrize(("text", "limit", "over"), [
    ("x" * 10, 10, False),
    ("x" * 11, 10, True),
    ("é" * 5, 10, False),     # 5 characters, 10 bytes: exactly the limit
    ("é" * 6, 10, True),      # 6 characters under the limit, 12 bytes over it
    ("€" * 4, 12, False),     # three bytes each
    ("😀" * 3, 11, True),     # four bytes each: 12
    ("a😀", 20, False),       # surely under: 2 characters * 4 <= 20, nothing encoded
])
def test_a_text_frame_is_measured_in_bytes_not_characters(text: str, limit: int,
                                                          over: bool) -> None:
    assert frame_over(text, limit) is over
    assert frame_over(text.encode(), limit) is over  # a binary frame: the same size


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_frame_over_agrees_with_the_encoded_size(text: str, limit: int) -> None:
    assert frame_over(text, limit) is (len(text.encode("utf-8", "surrogatepass")) > limit)
