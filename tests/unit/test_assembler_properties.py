"""Property tests: the assembler's invariants hold however the upstream chunks its stream.

Two kinds of re-chunking: (1) the same bytes cut at random offsets (TCP does this) must give
exactly the golden events; (2) each delta's text re-split into random pieces (another tokenizer
would) must keep every invariant and the same final output text.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.assembly import assemble, golden_bytes
from tests.support.conformance import check_stream
from tests.unit.test_assembler_golden import CASES

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def payloads(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            body = block[6:]
            out.append(body.decode() if body == b"[DONE]" else json.loads(body))
    return out


def encode(chunks: list[Any]) -> bytes:
    return b"".join(
        b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c).encode()) + b"\n\n"
        for c in chunks
    )


def split_text(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if text[a:b]]


def resplit(chunks: list[Any], data: st.DataObject) -> list[Any]:
    """Split every text-bearing delta into several chunks carrying the pieces."""
    out: list[Any] = []
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"] if isinstance(chunk, dict) and chunk.get(
            "choices") else None
        key = next((k for k in ("content", "reasoning", "reasoning_content")
                    if delta and delta.get(k)), None)
        cuts = data.draw(st.lists(st.integers(0, 64), max_size=4))
        if chunk_is_final(chunk) or (key is None and not argument_only(delta)):
            out.append(chunk)
        elif key is None:
            call = delta["tool_calls"][0]
            for piece in split_text(call["function"]["arguments"], cuts):
                piece_delta = {"tool_calls": [{"index": call["index"],
                                               "function": {"arguments": piece}}]}
                out.append({**chunk, "choices": [{**chunk["choices"][0], "delta": piece_delta}]})
        else:
            for piece in split_text(delta[key], cuts):
                out.append({**chunk, "choices": [{**chunk["choices"][0], "delta": {key: piece}}]})
    return out


def chunk_is_final(chunk: Any) -> bool:
    return not isinstance(chunk, dict) or not chunk.get("choices") or bool(
        chunk["choices"][0].get("finish_reason"))


def argument_only(delta: dict[str, Any] | None) -> bool:
    """A tool-call delta carrying only an argument fragment (no id, no name)."""
    calls = (delta or {}).get("tool_calls") or []
    return len(calls) == 1 and set(calls[0]) == {"index", "function"} and set(
        calls[0]["function"]) == {"arguments"} and bool(calls[0]["function"]["arguments"])


def final_texts(events: list[dict[str, Any]]) -> list[str]:
    texts = []
    for item in events[-1]["response"]["output"]:
        if item["type"] == "function_call":
            texts.append(item["arguments"])
        else:
            texts.append("".join(part["text"] for part in item["content"]))
    return texts


@SETTINGS
@given(name=st.sampled_from(CASES), cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_byte_rechunking_changes_nothing(name: str, cuts: list[int]) -> None:
    raw = golden_bytes(name)
    lost = name == "cut"
    expected = assemble(raw, connection_lost=lost)
    got = assemble(raw, [c % (len(raw) + 1) for c in cuts], connection_lost=lost)
    assert got == expected


@SETTINGS
@given(name=st.sampled_from(CASES), data=st.data())
def test_delta_rechunking_keeps_every_invariant(name: str, data: st.DataObject) -> None:
    raw = golden_bytes(name)
    lost = name == "cut"
    reference = assemble(raw, connection_lost=lost)
    rechunked = encode(resplit(payloads(raw), data))
    events = assemble(rechunked, connection_lost=lost)
    check_stream(events)
    assert final_texts(events) == final_texts(reference)
    assert events[-1]["type"] == reference[-1]["type"]
