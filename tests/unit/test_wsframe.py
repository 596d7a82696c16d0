"""core/events/wsframe.py: client frames of WebSocket mode, and services/responses/localchains.py's
bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import InvalidRequest
from proxy.core.events.wsframe import CREATE, frame_over, parse_frame
from proxy.services.responses.localchains import LocalChains


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


async def test_the_socket_sends_each_events_json_and_knows_the_terminal_one_by_type() -> None:
    """Each event of a batch is one text frame, its JSON as the service made it (nothing parsed:
    here a terminal event whose JSON does not start with its type); the socket is `CLOSING`
    before the terminal event's frame goes out (a client may answer the moment it reads it)."""
    import contextlib
    import types
    from collections.abc import AsyncIterator

    from proxy.services.responses.create import Outcome
    from proxy.services.responses.steering import Run
    from proxy.web.routes.websocket import SocketState, _Connection

    batches = [[("response.created", b'{"type":"response.created","sequence_number":0}')],
               [("response.output_text.delta", b'{"type":"response.output_text.delta"}'),
                ("response.completed", b'{"sequence_number":2,"type":"response.completed"}')]]
    sent: list[tuple[str, SocketState]] = []

    async def stream() -> AsyncIterator[list[tuple[str, bytes]]]:
        for batch in batches:
            yield batch

    async def create(*args: object, **kwargs: object) -> Outcome:
        return Outcome(stream=stream())

    streams = types.SimpleNamespace(send_timeout=5.0)
    limits = types.SimpleNamespace(max_input_items=100)
    runtime = types.SimpleNamespace(settings=types.SimpleNamespace(streams=streams,
                                                                   limits=limits),
                                    process=types.SimpleNamespace(limits=None),
                                    services=types.SimpleNamespace(
                                        responses=types.SimpleNamespace(
                                            create=create,
                                            setting_up=contextlib.nullcontext)))
    socket = types.SimpleNamespace(scope={}, app=types.SimpleNamespace(
        state=types.SimpleNamespace(runtime=runtime)))
    connection = _Connection(socket, runtime)  # type: ignore[arg-type]

    async def send_text(text: str) -> None:
        sent.append((text, connection.state))

    socket.send_text = send_text
    connection.state = SocketState.RUNNING
    await connection.run(Run({"model": "m"}))
    assert [text for text, _ in sent] == [data.decode() for batch in batches
                                          for _, data in batch]
    assert [state for _, state in sent] == [SocketState.RUNNING] * 2 + [SocketState.CLOSING]


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
