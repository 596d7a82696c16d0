"""Raw upstream bytes to events (core/events/chatstream.py): a payload that is no chunk fails
the response saying which it was, from a read or at the body's end; nothing is read past the
terminal event."""

from __future__ import annotations

import pytest

from tests.support.assembly import assemble

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
STOP = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'


def _failure(events: list[dict[str, object]]) -> object:
    assert events[-1]["type"] == "response.failed"
    response = events[-1]["response"]
    assert isinstance(response, dict)
    return response["error"]["message"]


@pytest.mark.parametrize(("payload", "message"), [
    (b"{not json", "upstream sent a chunk that is not JSON"),
    (b"null", "upstream sent a chunk that is not a JSON object"),
    (b"[1]", "upstream sent a chunk that is not a JSON object"),
    (b'"text"', "upstream sent a chunk that is not a JSON object"),
])
@pytest.mark.parametrize("at_end", [False, True])
def test_a_payload_that_is_no_chunk_fails_the_response(payload: bytes, message: str,
                                                       at_end: bool) -> None:
    # `at_end`: the payload's blank line never came, so the body's end decodes it.
    frame = b"data: " + payload + (b"" if at_end else b"\n\n")
    events = assemble(ROLE + TEXT + frame)
    assert _failure(events) == message
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_nothing_is_read_past_the_terminal_event() -> None:
    events = assemble(ROLE + TEXT + STOP + b"data: [DONE]\n\n" + TEXT + b"data: {bad\n\n")
    assert events[-1]["type"] == "response.completed"
    assert sum(e["type"] == "response.output_text.delta" for e in events) == 1
