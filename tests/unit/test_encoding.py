"""Events to JSON (core/events/encoding.py): the bytes are `orjson.dumps` of each event, byte
for byte, and the response object the start events share is encoded once for both."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import orjson
import pytest

from proxy.core.compaction import COMPACTION
from proxy.core.events.assembler import Assembler
from proxy.core.events.encoding import encode_events
from proxy.core.ids import counter_ids
from tests.support.assembly import CREATED_AT, assemble, base_response, golden_bytes


def _assembler(**echo: Any) -> Assembler:
    return Assembler(base_response() | echo, ids=counter_ids(), clock=lambda: CREATED_AT)


def _plain(events: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    return [(event["type"], orjson.dumps(event)) for event in events]


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("echo", [{}, {"metadata": {"k": "é\"\n\u2028"}, "user": "u"}])
def test_start_events_are_their_json_byte_for_byte(background: bool,
                                                   echo: dict[str, Any]) -> None:
    start = _assembler(**echo).start(background=background)
    assert encode_events(start) == _plain(start)


def test_a_compacted_start_and_a_whole_answer_are_their_json() -> None:
    assembler = _assembler()
    assembler.preface({"type": COMPACTION, "id": "cmp_1", "encrypted_content": "x"})
    start = assembler.start()
    assert encode_events(start) == _plain(start)
    events = [*assemble(golden_bytes("reasoning_then_text")),
              *assemble(golden_bytes("two_tool_calls"))]
    for cut in range(len(events)):
        assert encode_events(events[cut:]) == _plain(events[cut:])


def test_the_start_events_response_is_encoded_once() -> None:
    start = _assembler().start()
    profile = cProfile.Profile()
    profile.enable()
    encode_events(start)
    profile.disable()
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    dumps = sum(calls for (_, _, name), (_, calls, *_) in stats.items() if "dumps" in name)
    assert dumps == 1  # one per event before: the whole request echo twice
