"""Compaction's pure rules (core/compaction.py): the sealed item, what it stands for when a list
of items is expanded, what an automatic compaction keeps, the summarisation request, the
request fields, and the stream events (validated by the SDK's types)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types.responses import ResponseCompactionItem

from proxy.core import compaction as c
from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.items import parse_input, seal_reasoning
from proxy.core.seal import VERSION, Sealer
from proxy.core.translate.chat import to_messages
from tests.support.conformance import check_invariants, check_vllm_rules, validate_with_sdk

SEALER = Sealer((b"test-secret",), 1 << 20)
OTHER_FLEET = Sealer((b"another-secret",), 1 << 20)


def user(text: str, item_id: str = "") -> dict[str, Any]:
    return {"id": item_id or f"msg_{text}", "type": "message", "role": "user",
            "status": "completed", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"id": f"msg_a_{text}", "type": "message", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call(call_id: str) -> dict[str, Any]:
    return {"id": f"fc_{call_id}", "type": "function_call", "call_id": call_id,
            "name": "get_weather", "arguments": "{}", "status": "completed"}


def output(call_id: str) -> dict[str, Any]:
    return {"id": f"fco_{call_id}", "type": "function_call_output", "call_id": call_id,
            "output": "sunny", "status": "completed"}


def compaction(text: str, tail: int = 0, item_id: str = "cmp_1") -> dict[str, Any]:
    return c.make_item(SEALER, c.Summary(text, tail), item_id)


def opener(blob: str) -> c.Summary:
    return c.open_summary(SEALER, blob, "input")


def texts(items: list[dict[str, Any]]) -> list[str]:
    return [f"{i['role']}:{i['content'][0]['text']}" if i["type"] == "message" else i["type"]
            for i in items]


# -- the sealed item ---------------------------------------------------------------------------
def test_a_compaction_item_round_trips_and_validates_as_the_sdks_item() -> None:
    item = compaction("the summary", tail=2)
    ResponseCompactionItem.model_validate(item, strict=True)
    assert c.open_summary(SEALER, item["encrypted_content"], "x") == c.Summary("the summary", 2)
    parsed = parse_input([item], counter_ids(), max_items=10, sealer=SEALER)
    assert parsed == [item]


@pytest.mark.parametrize("blob", [
    "not-ours",
    "rpx2.AAAA",
    # another fleet's secret
    c.make_item(OTHER_FLEET, c.Summary("forged"), "cmp_x")["encrypted_content"],
    # a reasoning blob of ours is not a summary (the seal's purpose)
    seal_reasoning(SEALER)('{"summary": "x", "tail": 0}'),
])
def test_a_forged_or_foreign_blob_is_a_400_naming_it(blob: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_input([user("hi"), {"type": "compaction", "encrypted_content": blob}],
                    counter_ids(), max_items=10, sealer=SEALER)
    assert info.value.param == "input[1].encrypted_content"
    assert info.value.code == "invalid_encrypted_content"


@pytest.mark.parametrize("where", [0, 40, -1])  # in the tag, in the payload, its last byte
def test_an_altered_blob_is_refused(where: int) -> None:
    blob = compaction("genuine summary text")["encrypted_content"]
    raw = bytearray(base64.urlsafe_b64decode(blob[len(VERSION):]))
    raw[where] ^= 0x01
    altered = VERSION + base64.urlsafe_b64encode(bytes(raw)).decode()
    with pytest.raises(InvalidRequest) as info:
        parse_input([{"type": "compaction", "encrypted_content": altered}], counter_ids(),
                    max_items=10, sealer=SEALER)
    assert info.value.param == "input[0].encrypted_content"


def test_a_missing_blob_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_input([{"type": "compaction"}], counter_ids(), max_items=10, sealer=SEALER)
    assert info.value.param == "input[0].encrypted_content"


# -- expansion -----------------------------------------------------------------------------------
def test_the_compact_output_expands_to_the_user_messages_and_the_summary() -> None:
    history = [user("one"), assistant("first answer"), call("c1"), output("c1"), user("two"),
               assistant("second answer")]
    item = compaction("SUMMARY")
    compacted = c.compacted_output(c.expand(history, opener), item)
    assert texts(compacted) == ["user:one", "user:two", "compaction"]
    later = c.expand([*compacted, user("three")], opener)
    assert texts(later) == ["user:one", "user:two", f"system:{c.SUMMARY_HEADER}SUMMARY",
                            "user:three"]


def test_a_compaction_keeps_what_loaded_tools() -> None:
    """A tool search's output and an `additional_tools` item stay through a summary: the
    tools they loaded stay offered (core/tools/toolsearch.py)."""
    search = {"id": "tsc_1", "type": "tool_search_call", "status": "completed",
              "execution": "server", "call_id": "s1", "arguments": {"query": "mail"}}
    found = {"id": "tso_1", "type": "tool_search_output", "status": "completed",
             "execution": "server", "call_id": "s1",
             "tools": [{"type": "function", "name": "send_mail"}]}
    added = {"id": "at_1", "type": "additional_tools", "role": "developer",
             "tools": [{"type": "function", "name": "read_mail"}]}
    history = [user("one"), added, search, found, assistant("a1")]
    out = c.expand([*history, compaction("S")], opener)
    assert texts(out) == ["user:one", "additional_tools", "tool_search_output",
                          f"system:{c.SUMMARY_HEADER}S"]
    compacted = c.compacted_output(c.expand(history, opener), compaction("S"))
    assert texts(compacted) == ["user:one", "tool_search_output", "compaction"]


def test_a_compaction_keeps_its_tail_and_replaces_everything_else_but_user_messages() -> None:
    chain = [user("one"), assistant("a1"), user("two"), assistant("a2"), call("c1"),
             output("c1"), compaction("S", tail=2), assistant("after")]
    out = c.expand(chain, opener)
    assert texts(out) == ["user:one", "user:two", f"system:{c.SUMMARY_HEADER}S",
                          "function_call", "function_call_output", "assistant:after"]


def test_a_later_compaction_replaces_the_earlier_summary() -> None:
    chain = [user("one"), assistant("a1"), compaction("FIRST", item_id="cmp_1"),
             user("two"), assistant("a2"), compaction("SECOND", item_id="cmp_2")]
    out = c.expand(chain, opener)
    assert texts(out) == ["user:one", "user:two", f"system:{c.SUMMARY_HEADER}SECOND"]


def test_the_summary_reaches_the_model_as_system_context_and_triggers_do_not() -> None:
    items = c.expand([user("one"), compaction("S"), user("two"),
                      {"id": "cmp_t", "type": "compaction_trigger"}], opener)
    assert to_messages(items) == [{"role": "user", "content": "one"},
                                  {"role": "system", "content": c.SUMMARY_HEADER + "S"},
                                  {"role": "user", "content": "two"}]


def test_a_trigger_must_be_the_last_input_item() -> None:
    trigger = {"id": "t", "type": "compaction_trigger"}
    assert c.check_trigger([user("x"), trigger]) is True
    assert c.check_trigger([user("x")]) is False
    with pytest.raises(InvalidRequest) as info:
        c.check_trigger([trigger, user("x")])
    assert info.value.param == "input[0]"


# -- what an automatic compaction keeps ----------------------------------------------------------
def test_the_tail_is_the_newest_turn() -> None:
    items = [user("one"), assistant("a1"), user("two")]
    assert c.tail_length(items) == 1
    # The whole history resent as input (a store: false client): still only the newest turn.
    assert c.tail_length([*items, assistant("a2"), user("three"), user("four")]) == 2


def test_the_tail_takes_the_calls_its_outputs_answer() -> None:
    items = [user("one"), assistant("a1"), user("two"), call("c1"), call("c2"),
             output("c1"), output("c2")]
    assert c.tail_length(items) == 4  # both calls come with their outputs
    agent_loop = [user("one"), call("c1"), output("c1"), call("c2"), output("c2")]
    assert c.tail_length(agent_loop) == 2  # the earlier call and output are compacted


def test_only_the_newest_turn_means_nothing_to_compact() -> None:
    assert c.tail_length([user("only")]) == 1


def test_after_the_models_answer_everything_is_compacted() -> None:
    # A lone compaction_trigger after a previous response: nothing of the client's is new.
    assert c.tail_length([user("one"), assistant("a1")]) == 0


# -- the summarisation turn ----------------------------------------------------------------------
def test_the_summary_request_is_the_conversation_plus_one_instruction() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}], "stream": True}
    body = c.summary_request(chat)
    assert body["messages"][:-1] == chat["messages"]
    assert body["messages"][-1] == {"role": "user", "content": c.SUMMARY_INSTRUCTION}
    assert body["stream"] is False and body["tool_choice"] == "none"
    assert body["tools"] == chat["tools"]
    assert body["max_tokens"] == c.SUMMARY_MAX_TOKENS
    assert c.summary_request(chat, max_model_len=4096)["max_tokens"] == 1024


@pytest.mark.parametrize(("answer", "text"), [
    ({"choices": [{"message": {"content": " the gist "}}]}, "the gist"),
    ({"choices": [{"message": {"content": ""}}]}, None),
    ({"choices": []}, None),
    ({"choices": [{"message": {"content": None}}]}, None),
    ("nonsense", None),
])
def test_the_summary_is_the_answers_content(answer: Any, text: str | None) -> None:
    assert c.summary_text(answer) == text


# -- requests ------------------------------------------------------------------------------------
def test_context_management_is_parsed_and_checked() -> None:
    body = {"model": "m", "input": "hi",
            "context_management": [{"type": "compaction", "compact_threshold": 100}]}
    request = parse_request(body, counter_ids())
    assert request.auto_compact and request.compact_threshold == 100
    default = parse_request({**body, "context_management": [{"type": "compaction"}]},
                            counter_ids())
    assert default.auto_compact and default.compact_threshold is None
    assert "context_management" not in request.echo()  # the SDK's Response has no such field
    for bad_value, param in [
        ([{"type": "truncate"}], "context_management[0].type"),
        ([{"type": "compaction", "compact_threshold": 0}],
         "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": "9"}],
         "context_management[0].compact_threshold"),
        ("compaction", "context_management"),
    ]:
        with pytest.raises(InvalidRequest) as info:
            parse_request({**body, "context_management": bad_value}, counter_ids())
        assert info.value.param == param
    with pytest.raises(InvalidRequest) as info:
        parse_request({**body, "background": True}, counter_ids())
    assert info.value.param == "context_management"


def test_the_compact_body_needs_a_model_and_some_context() -> None:
    with pytest.raises(InvalidRequest) as info:
        c.parse_compact_body({"input": "hi"})
    assert info.value.param == "model" and "model" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        c.parse_compact_body({"model": "m"})
    assert info.value.param == "input"
    parsed = c.parse_compact_body({"model": "m", "previous_response_id": "resp_1",
                                   "prompt_cache_key": "k", "surprise": 1})
    assert parsed.previous_response_id == "resp_1" and parsed.ignored == ("surprise",)
    with pytest.raises(InvalidRequest) as info:
        c.parse_compact_body({"model": "m", "input": "x", "surprise": 1}, strict=True)
    assert info.value.param == "surprise"


# -- the stream ----------------------------------------------------------------------------------
def test_a_prefaced_compaction_streams_first_and_the_events_validate() -> None:
    ids = counter_ids()
    base = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m",
            **parse_request({"model": "m", "input": "hi"}, ids).echo()}
    assembler = Assembler(base, ids=ids, clock=lambda: 2.0)
    item = compaction("S", tail=1)
    assembler.preface(item)
    events = assembler.start()
    events += assembler.feed({"choices": [{"delta": {"content": "hello"}}]})
    events += assembler.feed({"choices": [{"delta": {}, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    events += assembler.end()
    assert [e["type"] for e in events[2:5]] == ["response.output_item.added", c.COMPACTING,
                                                "response.output_item.done"]
    assert events[-1]["response"]["output"][0] == item
    assert events[-1]["response"]["output"][1]["type"] == "message"
    validate_with_sdk(events)
    check_invariants(events)
    check_vllm_rules(events)
    # A replay rebuilt from the final object (no event log) streams the item the same way.
    replayed = events_from_response(events[-1]["response"])
    assert [e["type"] for e in replayed] == [e["type"] for e in events]
    assert replayed[2:5] == events[2:5]
    validate_with_sdk(replayed)
