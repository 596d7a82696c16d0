"""SSE both ways (core/events/sse.py): `frames` writes each event as `event:` and one `data:`
line, byte for byte what clients parse (and what a replay of the stored JSON writes);
`DataDecoder` cuts an upstream's bytes into its `data:` payloads wherever the reads split."""

from __future__ import annotations

import pytest

from proxy.core.events.sse import DataDecoder, frames

BATCH = [("response.created", b'{"type":"response.created","sequence_number":0}'),
         ("response.output_text.delta", b'{"delta":"h\xc3\xa9"}'),
         ("response.output_text.delta", b'{"delta":"!"}'),
         ("response.completed", b"{}")]


@pytest.mark.parametrize("size", [0, 1, 2, 4])
def test_a_batch_is_its_events_framed_in_order(size: int) -> None:
    batch = BATCH[:size]
    assert frames(batch) == b"".join(b"event: %s\ndata: %s\n\n" % (kind.encode(), data)
                                     for kind, data in batch)
    assert frames(batch) == frames(list(batch))  # the same bytes the second time (a replay)


STREAM = (b'data: {"a":1}\n\n: comment\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'
          b"event: x\ndata:[DONE]\n\n")


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_payloads_are_the_same_wherever_the_reads_split(cut: int) -> None:
    decoder = DataDecoder()
    got = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) + decoder.flush()
    assert got == [b'{"a":1}', b'{"b":\n2}', b"[DONE]"]


def test_an_event_without_its_blank_line_counts_at_the_end() -> None:
    decoder = DataDecoder()
    assert decoder.feed(b"data: last") == []
    assert decoder.flush() == [b"last"]
