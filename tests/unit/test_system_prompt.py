"""All instructions, system and developer text → ONE leading system message, in order
(docs/contract.md "Request tolerance"; chat templates such as Qwen's refuse any other placement)."""

from __future__ import annotations

from typing import Any

from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.items import parse_input
from proxy.core.translate.chat import to_chat_request
from proxy.core.translate.system_prompt import lead_with_system


def chat(history: list[dict[str, Any]] | None = None, **body: Any) -> dict[str, Any]:
    request = parse_request({"model": "m", **body}, counter_ids())
    return to_chat_request(request, history or [])


def test_codex_shape_instructions_and_two_developer_messages_become_one_system() -> None:
    out = chat(instructions="You are Codex.", input=[
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "sandbox: read-only"}]},
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "approval: never"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
    ])
    assert out["messages"] == [
        {"role": "system", "content": "You are Codex.\n\nsandbox: read-only\n\napproval: never"},
        {"role": "user", "content": "go"},
    ]


def test_developer_message_mid_history_moves_into_the_leading_system_in_order() -> None:
    history = parse_input([
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "developer", "content": "late rule"},
    ], counter_ids(), max_items=10)
    out = chat(history, instructions="first", input=[
        {"role": "user", "content": "q2"}, {"role": "developer", "content": "last rule"}])
    assert out["messages"] == [
        {"role": "system", "content": "first\n\nsys\n\nlate rule\n\nlast rule"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    assert [m["role"] for m in out["messages"]].count("system") == 1


def test_no_system_text_adds_no_system_message() -> None:
    out = chat(input="hi")
    assert out["messages"] == [{"role": "user", "content": "hi"}]


def test_a_lone_leading_system_message_is_left_as_it_is() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert lead_with_system(messages) is messages


def test_system_parts_that_are_not_text_are_kept_in_order() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:x", "detail": "auto"}}
    out = lead_with_system([
        {"role": "user", "content": "u"},
        {"role": "system", "content": "a"},
        {"role": "system", "content": [{"type": "text", "text": "b"}, image]},
    ])
    assert out == [
        {"role": "system", "content": [{"type": "text", "text": "a"},
                                       {"type": "text", "text": "\n\n"},
                                       {"type": "text", "text": "b"}, image]},
        {"role": "user", "content": "u"},
    ]
