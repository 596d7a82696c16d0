"""Raw upstream bytes to events (core/events/chatstream.py): a payload that is no chunk fails
the response saying which it was, from a read or at the body's end; nothing is read past the
terminal event."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from proxy.core.events.assembler import Assembler
from proxy.core.events.chatstream import ChatStreamReader
from proxy.core.ids import counter_ids
from tests.support.assembly import CREATED_AT, assemble, base_response

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
# As vLLM streams a token (its id and model left out).
TOKEN = (b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,'
         b'"finish_reason":null}]}\n\n')
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


@pytest.mark.parametrize(("key", "kind", "most"), [
    ("content", "response.output_text.delta", 16),
    ("reasoning", "response.reasoning_text.delta", 17),
    ("reasoning_content", "response.reasoning_text.delta", 18),
])
def test_a_token_takes_few_calls_from_its_bytes_to_its_event(key: str, kind: str,
                                                             most: int) -> None:
    """The per-token path, counted: the read's lines, the payload, the chunk's lookups and
    the delta event. 26-27 calls a token before vLLM's reads were cut whole (sse.py), each
    payload handled inline and a fragment alone went straight to the open item of its kind;
    14.7 a content token now, 15.7 a reasoning one (16.7 named `reasoning_content`)."""
    token = TOKEN.replace(b'"content"', b'"%s"' % key.encode())
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    reader = ChatStreamReader(assembler)
    assembler.start()
    reader.feed(ROLE + token)  # the item is open
    profile = cProfile.Profile()
    profile.enable()
    events = reader.feed(token * 16)
    profile.disable()
    assert [e["type"] for e in events] == [kind] * 16
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    per_token = sum(row[1] for row in stats.values()) / 16
    assert per_token <= most, per_token
