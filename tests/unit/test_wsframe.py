"""core/wsframe.py: client frames of WebSocket mode, and services/localchains.py's bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import InvalidRequest
from proxy.core.wsframe import CREATE, frame_over, parse_frame
from proxy.services.localchains import LocalChains


def test_create_frame_gives_the_body_without_type_and_stream() -> None:
    kind, body = parse_frame(b'{"type": "response.create", "model": "m", "stream": true,'
                             b' "background": false}')
    assert kind == CREATE
    assert body == {"model": "m"}


def test_other_frame_types_are_returned_not_refused() -> None:
    assert parse_frame('{"type": "response.append", "x": 1}') == ("response.append", {"x": 1})


@pytest.mark.parametrize("data, param", [
    (b"{", None), (b"3", "type"), (b'{"type": 3}', "type"), (b"{}", "type"),
    (b'{"type": "response.create", "background": true}', "background"),
])
def test_bad_frames_raise_naming_the_parameter(data: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_frame(data)
    assert raised.value.param == param
    assert raised.value.status == 400


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


def test_the_terminal_events_are_found_by_their_opening_bytes() -> None:
    import orjson

    from proxy.web.websocket import _TERMINAL_HEADS

    for kind in ("response.completed", "response.incomplete", "response.failed",
                 "response.cancelled"):
        assert orjson.dumps({"type": kind, "sequence_number": 9}).startswith(_TERMINAL_HEADS)
    for kind in ("response.created", "response.output_text.delta", "response.completed_x"):
        assert not orjson.dumps({"type": kind, "sequence_number": 1}).startswith(_TERMINAL_HEADS)


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
