"""Logprobs: `top_logprobs` / `include: ["message.output_text.logprobs"]` mapped onto vLLM's
`logprobs` / `top_logprobs`, and vLLM's per-chunk logprobs carried onto output text (deltas,
`output_text.done`, the final part), a restored stream and a replay of the stored object."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseOutputText

from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler
from proxy.core.events.assembler import text as text_items
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.translate.chat import to_chat_request
from tests.support.assembly import CREATED_AT, assemble, base_response
from tests.support.conformance import check_stream

INCLUDE = ["message.output_text.logprobs"]


def parse(**body: Any) -> Any:
    return parse_request({"model": "m", "input": "hi", **body}, counter_ids())


# -- request mapping ---------------------------------------------------------------------------
def test_include_asks_vllm_for_logprobs_with_top_logprobs() -> None:
    request = parse(include=INCLUDE, top_logprobs=3)
    chat = to_chat_request(request, [])
    assert chat["logprobs"] is True and chat["top_logprobs"] == 3
    assert request.echo()["top_logprobs"] == 3
    only_include = to_chat_request(parse(include=INCLUDE), [])
    assert only_include["logprobs"] is True and only_include["top_logprobs"] == 0


def test_top_logprobs_without_the_include_is_echoed_but_asks_nothing_upstream() -> None:
    # OpenAI answers `logprobs: []` here: the include is what returns them.
    request = parse(top_logprobs=5)
    assert request.echo()["top_logprobs"] == 5
    chat = to_chat_request(request, [])
    assert "logprobs" not in chat and "top_logprobs" not in chat


@pytest.mark.parametrize("value", [21, -1, "3", 2.5, True, [1]])
def test_bad_top_logprobs_is_a_400_naming_it(value: Any) -> None:
    assert parse(include=INCLUDE, top_logprobs=20).top_logprobs == 20  # the range's end
    with pytest.raises(InvalidRequest) as info:
        parse(include=INCLUDE, top_logprobs=value)
    assert info.value.status == 400 and info.value.param == "top_logprobs"


# -- the assembler ---------------------------------------------------------------------------
def lp(token: str, value: float, *alternatives: tuple[str, float]) -> dict[str, Any]:
    """One vLLM logprobs entry, the sampled token first among its alternatives."""
    tops = [(token, value), *alternatives]
    return {"token": token, "logprob": value, "bytes": list(token.encode()),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                             for t, v in tops]}


def sse(*deltas: tuple[dict[str, Any], list[dict[str, Any]] | None],
        finish: str = "stop") -> bytes:
    frames = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                            "logprobs": None, "finish_reason": None}]}]
    for n, (delta, entries) in enumerate(deltas):
        last = n == len(deltas) - 1
        frames.append({"choices": [{"index": 0, "delta": delta,
                                    "logprobs": None if entries is None else
                                    {"content": entries},
                                    "finish_reason": finish if last else None}]})
    frames.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                            "total_tokens": 7}})
    body = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)
    return body + b"data: [DONE]\n\n"


def text_events(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_deltas_done_and_the_final_part_carry_the_logprobs() -> None:
    events = assemble(sse(({"content": "Hi"}, [lp("Hi", -0.1, (" Hello", -2.5))]),
                          ({"content": " there"}, [lp(" there", -0.3, (" you", -1.5))])))
    check_stream(events)
    deltas = text_events(events, "response.output_text.delta")
    assert deltas[0]["logprobs"] == [{"token": "Hi", "logprob": -0.1, "top_logprobs": [
        {"token": "Hi", "logprob": -0.1}, {"token": " Hello", "logprob": -2.5}]}]
    assert [e["token"] for e in deltas[1]["logprobs"]] == [" there"]
    done = text_events(events, "response.output_text.done")[0]
    assert [e["token"] for e in done["logprobs"]] == ["Hi", " there"]
    part = events[-1]["response"]["output"][0]["content"][0]
    ResponseOutputText.model_validate(part, strict=True)
    assert part["logprobs"][1] == {"token": " there", "bytes": list(b" there"),
                                   "logprob": -0.3, "top_logprobs": [
                                       {"token": " there", "bytes": list(b" there"),
                                        "logprob": -0.3},
                                       {"token": " you", "bytes": list(b" you"),
                                        "logprob": -1.5}]}
    part_done = text_events(events, "response.content_part.done")[0]["part"]
    assert part_done["logprobs"] == part["logprobs"]


def test_reasoning_logprobs_never_reach_output_text() -> None:
    # vLLM computes logprobs before the reasoning parser splits the text: reasoning chunks
    # carry them too.
    events = assemble(sse(({"reasoning": "Think"}, [lp("Think", -0.2)]),
                          ({"content": "Yes"}, [lp("Yes", -0.05)])))
    check_stream(events)
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert [e["token"] for e in final["output"][1]["content"][0]["logprobs"]] == ["Yes"]
    assert "logprobs" not in final["output"][0]["content"][0]


def test_a_mixed_delta_keeps_only_the_tokens_of_its_content() -> None:
    # harmony: several tokens per step, reasoning and content in one delta
    mixed = {"reasoning": "ok", "content": " Done."}
    events = assemble(sse((mixed, [lp("ok", -0.4), lp("<|end|>", -0.01), lp(" Done", -0.2),
                                   lp(".", -0.1)])))
    check_stream(events)
    delta = text_events(events, "response.output_text.delta")[0]
    assert [e["token"] for e in delta["logprobs"]] == [" Done", "."]


def test_held_whitespace_keeps_its_logprobs_when_text_follows() -> None:
    events = assemble(sse(({"content": "\n\n"}, [lp("\n\n", -0.5)]),
                          ({"content": "Answer"}, [lp("Answer", -0.1)])))
    check_stream(events)
    part = events[-1]["response"]["output"][0]["content"][0]
    assert part["text"] == "\n\nAnswer"
    assert [e["token"] for e in part["logprobs"]] == ["\n\n", "Answer"]


def test_without_logprobs_the_delta_shares_one_empty_list() -> None:
    events = assemble(sse(({"content": "a"}, None), ({"content": " b"}, None)))
    deltas = text_events(events, "response.output_text.delta")
    assert all(e["logprobs"] is text_items._EMPTY_LIST for e in deltas)
    assert events[-1]["response"]["output"][0]["content"][0]["logprobs"] == []


def test_a_restored_message_keeps_the_logprobs_already_streamed() -> None:
    live = assemble(sse(({"content": "Hi"}, [lp("Hi", -0.1, (" Hey", -2.0))]),
                        ({"content": " there"}, [lp(" there", -0.3)])))
    cut = next(i for i, e in enumerate(live) if e["type"] == "response.output_text.done")
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.restore(live[:cut])
    closing = assembler.fail("the worker running this response stopped")
    check_stream(live[:cut] + closing)
    done = text_events(closing, "response.output_text.done")[0]
    assert [e["token"] for e in done["logprobs"]] == ["Hi", " there"]
    part = closing[-1]["response"]["output"][0]["content"][0]
    assert part["logprobs"][0]["top_logprobs"][1] == {"token": " Hey", "bytes": list(b" Hey"),
                                                      "logprob": -2.0}


def test_a_replay_of_the_stored_object_carries_the_logprobs() -> None:
    live = assemble(sse(({"content": "Hi"}, [lp("Hi", -0.1)]),
                        ({"content": " there"}, [lp(" there", -0.3)])))
    replayed = events_from_response(live[-1]["response"])
    check_stream(replayed)
    delta = text_events(replayed, "response.output_text.delta")[0]
    done = text_events(replayed, "response.output_text.done")[0]
    assert [e["token"] for e in delta["logprobs"]] == ["Hi", " there"]
    assert done["logprobs"] == text_events(live, "response.output_text.done")[0]["logprobs"]
    added = text_events(replayed, "response.content_part.added")[0]
    assert added["part"]["logprobs"] == []
