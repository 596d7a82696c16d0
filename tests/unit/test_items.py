"""Input items: every shape a client sends, checked, in the one stored form."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.items import (
    fetches_media,
    file_parts,
    image_urls,
    open_reasoning,
    parse_input,
    reasoning_text,
    seal_reasoning,
)
from proxy.core.seal import Sealer

SEALER = Sealer((b"test-secret",), 1 << 20)


def items(value: Any) -> list[dict[str, Any]]:
    return parse_input(value, counter_ids(), max_items=100, sealer=SEALER)


def refused(value: Any, param: str) -> str:
    with pytest.raises(InvalidRequest) as info:
        items(value)
    assert info.value.param == param, info.value.message
    return info.value.message


def test_easy_and_typed_messages_become_stored_messages() -> None:
    out = items([
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "be brief"}]},
        {"role": "assistant", "content": "hello"},
        {"type": "message", "role": "assistant", "id": "msg_prev", "status": "completed",
         "content": [{"type": "output_text", "text": "again", "annotations": []}]},
    ])
    assert [i["role"] for i in out] == ["user", "developer", "assistant", "assistant"]
    assert out[0] == {"id": "msg_1", "type": "message", "role": "user", "status": "completed",
                      "content": [{"type": "input_text", "text": "hi"}]}
    assert out[2]["content"] == [{"type": "output_text", "text": "hello", "annotations": []}]
    assert out[3]["id"] == "msg_prev"  # a client's id is kept


def test_images_and_text_files() -> None:
    data = "data:text/plain;base64," + base64.b64encode(b"file body").decode()
    out = items([{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"},
        {"type": "input_file", "file_data": data, "filename": "a.txt"},
    ]}])
    assert out[0]["content"][0] == {"type": "input_image", "detail": "auto",
                                    "image_url": "https://x/y.png"}
    assert out[0]["content"][1]["filename"] == "a.txt"


def test_unsupported_parts_name_their_path() -> None:
    refused([{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}],
            "input[0].content[0].file_id")
    binary = base64.b64encode(b"\x89PNG\x00\x01").decode()
    refused([{"role": "user", "content": [{"type": "input_file", "file_data": binary}]}],
            "input[0].content[0]")
    refused([{"role": "user", "content": [{"type": "input_file", "file_data": "not base64!"}]}],
            "input[0].content[0]")
    refused([{"role": "user", "content": [{"type": "input_file", "file_url": "http://x",
                                           "file_id": "file-1"}]}], "input[0].content[0]")
    refused([{"role": "user", "content": "x"}, {"role": "user", "content": [
        {"type": "audio"}]}], "input[1].content[0].type")
    refused([{"role": "robot", "content": "x"}], "input[0].role")
    refused([{"role": "user"}], "input[0].content")


def test_unknown_item_types_are_refused_by_name() -> None:
    message = refused([{"type": "item_reference", "id": "msg_1"}], "input[0].type")
    assert "item_reference" in message
    refused([{"type": "image_generation_call", "id": "ig"}], "input[0].type")
    # Every hosted kind's item is named among the supported ones (core/hosted.py KINDS).
    for kind in ("web_search_call", "file_search_call", "code_interpreter_call"):
        assert repr(kind) in message
    refused([{"content": "no role, no type"}], "input[0].type")
    refused(["just a string"], "input[0]")


def test_function_call_and_output() -> None:
    out = items([
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ])
    assert out[0] == {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
                      "arguments": "{}", "status": "completed"}
    assert out[1]["output"] == "42" and out[1]["call_id"] == "call_1"
    refused([{"type": "function_call_output", "output": "x"}], "input[0].call_id")
    refused([{"type": "function_call", "call_id": "c", "arguments": "{}"}], "input[0].name")


def test_reasoning_items_round_trip_through_the_seal() -> None:
    sealed = seal_reasoning(SEALER)("because")
    out = items([{"type": "reasoning", "id": "rs_1", "summary": [],
                  "encrypted_content": sealed}])
    # Stored as sent: the blob, not its text; the text appears only in the copy translated.
    assert out[0] == {"id": "rs_1", "type": "reasoning", "summary": [],
                      "encrypted_content": sealed}
    shown, size = open_reasoning(out[0], SEALER, "input[0].encrypted_content")
    assert reasoning_text(shown) == "because" and size == len("because")
    assert "content" not in out[0]
    with_text = items([{"type": "reasoning", "summary": [],
                        "content": [{"type": "reasoning_text", "text": "raw"}]}])
    assert reasoning_text(with_text[0]) == "raw"


@pytest.mark.parametrize("blob", [
    "gAAAAB-someone-elses",  # OpenAI's: not ours
    "rpx1.eJxLSk1OLC1OBQALMALZ",  # the old unauthenticated form (zlib of "because")
    seal_reasoning(Sealer((b"another-secret",), 1 << 20))("because"),
    seal_reasoning(Sealer((b"test-secret",), 1 << 20))("x" * 5000)[:-8] + "AAAAAAAA",
])
def test_a_reasoning_blob_that_is_not_ours_is_refused_naming_it(blob: str) -> None:
    refused([{"role": "user", "content": "q"},
             {"type": "reasoning", "summary": [], "encrypted_content": blob}],
            "input[1].encrypted_content")


def test_a_reasoning_blob_larger_than_the_cap_is_refused() -> None:
    blob = seal_reasoning(SEALER)("x" * 5000)
    capped = Sealer((b"test-secret",), 4096)
    [item] = parse_input([{"type": "reasoning", "summary": [], "encrypted_content": blob}],
                         counter_ids(), max_items=10, sealer=capped)  # the seal alone: fine
    with pytest.raises(InvalidRequest) as info:
        open_reasoning(item, capped, "input[0].encrypted_content")
    assert info.value.param == "input[0].encrypted_content"
    assert info.value.code == "invalid_encrypted_content"
    assert "4096" in info.value.message and "--max-sealed-bytes" in info.value.message


@pytest.mark.parametrize("kind", [["mcp_call"], {"a": 1}, 3])
def test_an_item_type_that_is_not_a_string_is_a_400_naming_it(kind: object) -> None:
    # A list `type` once reached a set lookup (unhashable: a 500); found by the fuzz suite.
    with pytest.raises(InvalidRequest) as caught:
        parse_input([{"type": kind}], counter_ids(), max_items=8)
    assert caught.value.param == "input[0].type"


def test_a_web_search_call_is_taken_back_as_history() -> None:
    """A stateless client replays its output, web_search_call included."""
    (item,) = parse_input([{"type": "web_search_call", "id": "ws_1", "status": "completed",
                            "action": {"type": "search", "query": "q"}}], counter_ids(),
                          max_items=10)
    assert item == {"id": "ws_1", "type": "web_search_call", "status": "completed",
                    "action": {"type": "search", "query": "q"}}
    refused([{"type": "web_search_call", "action": "search"}], "input[0].action")


def test_a_code_interpreter_call_is_taken_back_as_history() -> None:
    """Its `code` and `container_id` are strings, its `outputs` a list: kept as sent."""
    sent = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
            "code": "print(1)", "container_id": "cntr_mcp",
            "outputs": [{"type": "logs", "logs": "1\n"}]}
    (item,) = parse_input([sent], counter_ids(), max_items=10)
    assert item == sent
    refused([{**sent, "code": ["print(1)"]}], "input[0].code")
    refused([{**sent, "outputs": "1"}], "input[0].outputs")


@pytest.mark.parametrize("value", [
    "hi",
    [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    [{"role": "user", "content": [
        {"type": "input_image", "image_url": "DATA:image/png;base64,AAAA"}]}],
    [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/a.png"}]}],
    [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}],
    [{"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_image", "image_url": "https://x/b.png"}]}],
    [{"type": "function_call_output", "call_id": "c1", "output": "plain"}],
])
def test_fetches_media_says_what_the_fetchers_walks_would_find(value: Any) -> None:
    """The one walk that lets a create skip the media and file fetchers agrees with them."""
    parsed = items(value)
    found = bool(list(image_urls(parsed)) or list(file_parts(parsed)))
    assert fetches_media(parsed) is found
