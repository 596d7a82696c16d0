"""SSE both ways (core/events/sse.py): `frames` writes each event as `event:` and one `data:`
line, byte for byte what clients parse (and what a replay of the stored JSON writes);
`DataDecoder` cuts an upstream's bytes into its `data:` payloads wherever the reads split."""

from __future__ import annotations

import cProfile
import itertools
import pstats

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# What vLLM sends (LF only, one `data: ` line an event), and streams that are not quite that
# (a comment, `data:` without its space, two `data:` lines, a run of blank lines, an empty
# payload, another field, a CR on one line): the decoder's quick way for the first must not
# change what it finds in any of them, wherever the reads split.
VLLM = b"".join(b'data: {"choices":[{"delta":{"content":"%d"}}]}\n\n' % n for n in range(4))
ODD_STREAMS = [
    VLLM + b"data: [DONE]\n\n",
    VLLM + b": ping\n\n" + VLLM,
    b'data:{"a":1}\n\ndata: {"b":2}\n\n',
    b'data: {"a":\ndata: 1}\n\ndata: {"b":2}\n\n',
    b'data: {"a":1}\n\n\n\ndata: {"b":2}\n\n',
    b"data: \n\ndata: x\n\n",
    b"event: e\ndata: {}\n\n" + VLLM,
    b"id: 3\n\n" + VLLM,
    b'data: {"a":1}\r\n\ndata: {"b":2}\n\n' + VLLM,  # a CR on a data line alone
]


def _line_by_line(stream: bytes) -> list[bytes]:
    """The SSE rules, one line at a time: what the decoder must find in `stream`."""
    found: list[bytes] = []
    data: list[bytes] = []
    for line in stream.split(b"\n")[:-1]:
        line = line.removesuffix(b"\r")
        if not line:
            if data:
                found.append(b"\n".join(data))
            data = []
        elif line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
    return found


@pytest.mark.parametrize("stream", ODD_STREAMS)
def test_lf_streams_give_their_payloads_wherever_the_reads_split(stream: bytes) -> None:
    expected = _line_by_line(stream)
    for cut in range(len(stream) + 1):
        for second in range(cut, len(stream) + 1, 7):
            decoder = DataDecoder()
            got = (decoder.feed(stream[:cut]) + decoder.feed(stream[cut:second])
                   + decoder.feed(stream[second:]) + decoder.flush())
            assert got == expected, (cut, second)


@pytest.mark.parametrize(("events", "most"), [(1, 7), (20, 32)])
def test_a_vllm_read_is_cut_without_a_call_per_line(events: int, most: int) -> None:
    """A read of vLLM's events is split once and each event sliced once: each line looked at
    by two or three method calls (strip a CR, is it data, a leading space) made three per
    event more, ~0.6 µs an event on the per-token path (a read of one token: 11 calls before,
    6 now; of 20 events: 144 before, 29 now)."""
    read = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' * events
    profile = cProfile.Profile()
    decoder = DataDecoder()
    profile.enable()
    payloads = decoder.feed(read)
    profile.disable()
    assert len(payloads) == events
    calls = sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
    assert calls <= most, calls


# Lines an upstream may send, vLLM's own most often; any of them may end in CRLF.
LINES = st.sampled_from([b'data: {"a":1}', b'data: {"a":1}', b"data: [DONE]", b"", b"", b"",
                         b'data:{"b":2}', b"data: ", b": ping", b"event: x", b"data:  two"])


# vLLM's shape, each event a data line and its blank line, either of which may end in CRLF.
EVENTS = st.lists(st.tuples(st.sampled_from([b'data: {"a":1}', b"data: [DONE]"]),
                            st.booleans()).flatmap(
    lambda line: st.sampled_from([[line, (b"", False)], [line, (b"", True)]])), max_size=8
).map(lambda events: [line for event in events for line in event])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.tuples(LINES, st.booleans()), max_size=30), EVENTS),
       st.lists(st.integers(min_value=0, max_value=400), max_size=4))
def test_any_stream_gives_its_payloads_wherever_the_reads_split(
        lines: list[tuple[bytes, bool]], cuts: list[int]) -> None:
    stream = b"".join(line + (b"\r\n" if crlf else b"\n") for line, crlf in lines)
    decoder = DataDecoder()
    bounds = [0, *sorted(min(cut, len(stream)) for cut in cuts), len(stream)]
    got = [payload for start, end in itertools.pairwise(bounds)
           for payload in decoder.feed(stream[start:end])]
    assert got + decoder.flush() == _line_by_line(stream + b"\n")
