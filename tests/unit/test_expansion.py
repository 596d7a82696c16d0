"""What one request expands to (references, history, opened blobs) is counted against the body
limit and refused naming the parameter that pushed it over (core/request/expansion.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.compaction import Summary, make_item
from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.expansion import Expansion
from proxy.core.request.items import reasoning_text, seal_reasoning
from proxy.core.seal import Sealer

SEALER = Sealer((b"test-secret",), 1 << 20)
LIMIT = 64 * 1024
BIG = {"id": "msg_big", "type": "message", "role": "user", "status": "completed",
       "content": [{"type": "input_text", "text": "x" * 8000}]}


def message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def refused(call: Any, param: str) -> str:
    with pytest.raises(InvalidRequest) as info:
        call()
    assert info.value.param == param and info.value.status == 400, info.value.message
    assert "--max-body-bytes" in info.value.message
    return info.value.message


def parsed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return parse_request({"model": "m", "input": items}, counter_ids(), sealer=SEALER).input


def test_one_stored_item_named_many_times_counts_each_time() -> None:
    # The fan-out: one 8 KB item, 64 references in a 2 KB body.
    refs = parsed([{"type": "item_reference", "id": "msg_big"}] * 64)
    refused(lambda: Expansion(LIMIT, SEALER).input(refs, {"msg_big": BIG}), "input[8].id")
    stored, shown = Expansion(LIMIT, SEALER).input(refs[:7], {"msg_big": BIG})
    assert stored == shown == [BIG] * 7


def test_history_counts_first_and_is_named_by_where_it_came_from() -> None:
    history = [BIG] * 9  # ~72 KB
    for param in ("previous_response_id", "conversation"):
        refused(lambda p=param: Expansion(LIMIT, SEALER).history(history, p), param)
    expansion = Expansion(LIMIT, SEALER)
    expansion.history([BIG] * 7, "previous_response_id")
    refused(lambda: expansion.input(parsed([message("y" * 9000)]), {}), "input")


def test_opened_blobs_count_and_the_stored_form_keeps_the_blob() -> None:
    blob = seal_reasoning(SEALER)("z" * 20_000)  # ~100 bytes sealed, 20 KB opened
    item = {"type": "reasoning", "summary": [], "encrypted_content": blob}
    items = parsed([message("q"), item, item, item, item])
    message_ = refused(lambda: Expansion(LIMIT, SEALER).input(items, {}),
                       "input[4].encrypted_content")
    assert "64" in message_ or str(LIMIT) in message_
    stored, shown = Expansion(LIMIT, SEALER).input(items[:3], {})
    assert "content" not in stored[1] and stored[1]["encrypted_content"] == blob
    assert reasoning_text(shown[1]) == "z" * 20_000
    assert len(orjson.dumps(stored)) < 1000  # what is stored is the blob, not its text


def test_sealed_history_items_open_for_translation_only() -> None:
    blob = seal_reasoning(SEALER)("because")
    stored_item = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": blob}
    [shown] = Expansion(LIMIT, SEALER).history([stored_item], "conversation")
    assert reasoning_text(shown) == "because" and "content" not in stored_item


def test_compaction_summaries_count_too() -> None:
    item = make_item(SEALER, Summary("s" * 33_000), "cmp_1")
    expansion = Expansion(LIMIT, SEALER)
    expansion.history([item], "previous_response_id")
    assert expansion.used > 33_000
    refused(lambda: expansion.history([item], "previous_response_id"), "previous_response_id")


def test_a_request_that_expands_nothing_is_not_measured() -> None:
    items = parsed([message("y" * (2 * LIMIT))])  # the body limit bounds it, not this
    expansion = Expansion(LIMIT, SEALER)
    stored, shown = expansion.input(items, {})
    assert stored == shown == items and expansion.used == 0
