"""The usage chunk the pass-through asks for on behalf of per-key limits is taken out of the
client's stream, whatever the read boundaries; everything else passes byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from proxy.services.fleet.passthrough import Relay, _without_usage
from proxy.services.metering.meter import tokens_of, usage_in_sse

CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
USAGE = (b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,'
         b'"total_tokens":10}}\n\n')
DONE = b"data: [DONE]\n\n"
STREAM = CHUNK * 3 + USAGE + DONE


async def _reads(data: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at:at + size]


@pytest.mark.parametrize("size", [1, 7, 40, 64, len(STREAM)])
async def test_the_usage_chunk_is_taken_out_and_kept(size: int) -> None:
    relay = Relay(200, {})
    out = b"".join([c async for c in _without_usage(relay, _reads(STREAM, size))])
    assert out == CHUNK * 3 + DONE
    assert tokens_of(relay.usage) == 10


async def test_a_stream_without_usage_passes_unchanged() -> None:
    relay = Relay(200, {})
    data = CHUNK * 2 + DONE
    assert b"".join([c async for c in _without_usage(relay, _reads(data, 13))]) == data
    assert relay.usage is None


def test_usage_read_from_the_end_of_a_stream() -> None:
    assert usage_in_sse(USAGE + DONE) == 10
    terminal = (b'event: response.completed\ndata: {"type":"response.completed","response":'
                b'{"usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11}}}\n\n')
    assert usage_in_sse(CHUNK + terminal) == 11
    assert usage_in_sse(CHUNK + DONE) == 0
