"""What a request is charged when vLLM reported no usage (services/metering/meter.py), and `stream`
read as vLLM reads it (core/request/fields.py `lax_bool`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request.fields import lax_bool
from proxy.services.metering.meter import Meter, delivered


@pytest.mark.parametrize(("value", "read"), [
    (True, True), (False, False), (None, None), (1, True), (0, False), (1.0, True),
    ("true", True), ("True", True), ("t", True), ("on", True), ("y", True), ("YES", True),
    ("1", True), ("false", False), ("f", False), ("off", False), ("n", False), ("No", False),
    ("0", False),
])
def test_stream_read_as_pydantic_reads_a_lax_bool(value: Any, read: bool | None) -> None:
    assert lax_bool({"stream": value}, "stream") is read


@pytest.mark.parametrize("value", ["maybe", "", " true", 2, -1, 0.5, [], {}])
def test_anything_else_is_a_400_naming_the_field(value: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        lax_bool({"stream": value}, "stream")
    assert refused.value.param == "stream"


def test_a_generation_is_charged_its_usage_else_what_it_streamed() -> None:
    usage = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    assert delivered(usage, 0, lambda: 99) == 10
    # A later upstream turn (a tool loop) cut before its own usage: its deltas on top.
    assert delivered(usage, 4, lambda: 99) == 14
    # Cut before any usage: the deltas and the prompt's estimate.
    assert delivered(None, 5, lambda: 20) == 25
    # Nothing streamed: nothing reached a client.
    assert delivered(None, 0, lambda: 20) == 0


async def test_a_meter_without_a_ticket_hands_the_stream_on_unwrapped() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"

    stream = body()
    meter = Meter()
    assert meter.stream(stream) is stream
    meter.charge(5)
    assert not meter.counts
    await meter.close()  # nothing to settle, no error
