"""Compaction: a long context replaced by a summary the fleet's model wrote (docs/contract.md
"Compaction"), as pure functions; the I/O (the summarisation turn, `/tokenize`) is in
services/responses/compaction.py.

The compaction item `{type: "compaction", id, encrypted_content}` carries a sealed payload
(core/seal.py, purpose `compaction`: the fleet secret, so any instance opens it and no client
forges one) `{"summary": text, "tail": n}`. What it stands for, wherever it sits in a list of
items (a client's input, a stored `previous_response_id` chain, a WebSocket connection's memory):

    every item before it, except user messages, the items that load tools (a tool search's
    output, `additional_tools`: core/tools/toolsearch.py; what they loaded stays loaded)
    and the last `tail` items before it.

So `POST /v1/responses/compact`'s output `[user messages..., compaction]` (tail 0) expands to
the user messages and the summary, as OpenAI's does ("all user messages, followed by a single
compaction item"), and a response compacted automatically (`context_management`) keeps the
turn it answers: its output starts with a compaction item whose `tail` counts the items of that
turn, which in the stored chain (inputs, then outputs) sit right before it. A later compaction
replaces an earlier summary too (the later summary was written from it).

The summary becomes one system message after the user messages kept and before the tail
(core/translate/system_prompt.py merges it into the leading system prompt): context from the server,
never mistaken for an answer of the model. Sealed means authenticated, not encrypted (as for
reasoning blobs): the client holding an item can read its summary, but not change it.

`compaction_trigger` (an input item, "Must be the final input item") asks for a compaction now,
whatever the size; it is not context and never reaches the model.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.ids import IdFactory
from proxy.core.request.fields import at, bad, expect_object, expect_str, opt_str
from proxy.core.seal import Sealer, SealError, seal_errors
from proxy.core.tools import toolsearch
from proxy.core.types import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    Event,
    Item,
)

COMPACTION = "compaction"
TRIGGER = "compaction_trigger"
PURPOSE = "compaction"  # the seal purpose: a reasoning blob never opens as a summary
ID_PREFIX = "cmp"
COMPACTING = "response.compaction.compacting"  # in the SDK's event union (1.3 of PROTOCOL-2026)
OBJECT = "response.compaction"
# What the summary says about itself in the context sent upstream.
SUMMARY_HEADER = "Summary of the earlier part of this conversation (it was compacted):\n"
# The instruction that ends the summarisation turn. The conversation itself goes first, as it
# is, so the replica's prefix cache (which holds exactly that conversation) serves the prompt.
SUMMARY_INSTRUCTION = (
    "Summarise the conversation so far for your own later use: the user's goals and "
    "constraints, decisions made, facts and results learned (tool outputs included), and what "
    "is still open. Be concise and complete; write only the summary.")
SUMMARY_MAX_TOKENS = 2048
# `context_management` without `compact_threshold`: compact past this share of the context.
DEFAULT_THRESHOLD_SHARE = 0.8
_OUTPUTS = {FUNCTION_CALL_OUTPUT: FUNCTION_CALL, CUSTOM_TOOL_CALL_OUTPUT: CUSTOM_TOOL_CALL}


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    tail: int = 0


# -- the sealed payload --------------------------------------------------------------------------
def seal_summary(sealer: Sealer, summary: Summary) -> str:
    return sealer.seal(PURPOSE, orjson.dumps({"summary": summary.text,
                                              "tail": summary.tail}).decode())


def open_summary(sealer: Sealer | None, blob: str, where: str) -> Summary:
    """The summary a blob of ours carries; a 400 naming `where` for anything else."""
    with seal_errors(where, "compaction"):
        if sealer is None:
            raise SealError("no sealer")
        opened = sealer.open(PURPOSE, blob)
        try:
            payload = orjson.loads(opened)
            text, tail = payload["summary"], payload["tail"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise SealError("not a summary") from None
        if not isinstance(text, str) or not isinstance(tail, int) or tail < 0:
            raise SealError("not a summary")
    return Summary(text, tail)


def make_item(sealer: Sealer, summary: Summary, item_id: str) -> Item:
    return {"id": item_id, "type": COMPACTION,
            "encrypted_content": seal_summary(sealer, summary)}


# -- input items ---------------------------------------------------------------------------------
def parse_compaction(item: dict[str, Any], ids: IdFactory, path: str,
                     sealer: Sealer | None) -> Item:
    """A client's compaction item, its seal checked now (a forged one is a 400 before any
    work, nothing inflated: it is opened when the request is expanded); stored as the SDK's
    ResponseCompactionItem."""
    where = at(path, "encrypted_content")
    blob = expect_str(item.get("encrypted_content"), where)
    with seal_errors(where, "compaction"):
        if sealer is None:
            raise SealError("no sealer")
        sealer.verify(PURPOSE, blob)
    return {"id": opt_str(item, "id", path, max_len=256) or ids(ID_PREFIX), "type": COMPACTION,
            "encrypted_content": blob}


def parse_trigger(item: dict[str, Any], ids: IdFactory, path: str) -> Item:
    return {"id": opt_str(item, "id", path, max_len=256) or ids(ID_PREFIX), "type": TRIGGER}


def check_trigger(items: Sequence[Item], path: str = "input") -> bool:
    """Whether the input asks for a compaction; a trigger anywhere but last is a 400."""
    for i, item in enumerate(items):
        if item.get("type") == TRIGGER and i != len(items) - 1:
            where = at(path, i)
            raise bad(where, f"Invalid '{where}': a 'compaction_trigger' item must be the "
                             "final input item.")
    return bool(items) and items[-1].get("type") == TRIGGER


def without_triggers(items: Sequence[Item]) -> list[Item]:
    return [item for item in items if item.get("type") != TRIGGER]


# -- expansion -----------------------------------------------------------------------------------
def has_compaction(items: Sequence[Item]) -> bool:
    return any(item.get("type") in (COMPACTION, TRIGGER) for item in items)


def expand(items: Sequence[Item], opener: Callable[[str], Summary]) -> list[Item]:
    """`items` as the model is to see them: each compaction item replaced, with what it stands
    for, by its summary (module docstring). `opener` opens a blob (a 400 when it is not ours)."""
    out: list[Item] = []
    for item in items:
        kind = item.get("type")
        if kind == TRIGGER:
            continue
        if kind != COMPACTION:
            out.append(item)
            continue
        summary = opener(item["encrypted_content"])
        cut = max(len(out) - summary.tail, 0)
        kept = [old for old in out[:cut] if is_user_message(old) or loads_tools(old)]
        out = [*kept, summary_message(item["id"], summary.text), *out[cut:]]
    return out


def is_user_message(item: Item) -> bool:
    return item.get("type") == MESSAGE and item.get("role") == "user"


def loads_tools(item: Item) -> bool:
    """An item whose tools stay offered while it is in the history (core/tools/toolsearch.py):
    a summary must not unload them."""
    return item.get("type") in (toolsearch.OUTPUT, toolsearch.ADDITIONAL_TOOLS)


def summary_message(item_id: str, text: str) -> Item:
    return {"id": item_id, "type": MESSAGE, "role": "system", "status": "completed",
            "content": [{"type": "input_text", "text": SUMMARY_HEADER + text}]}


def tail_length(items: Sequence[Item]) -> int:
    """How many of the last items an automatic compaction keeps whole: the newest turn, i.e.
    the trailing items that are not the model's (user, system and developer messages, tool
    outputs; none after a lone `compaction_trigger`), and further back whatever a kept tool
    output needs (its call), so no output is sent without its call. Counted on the items, not
    on the request's input, so a client that resends its whole history as `input` (`store:
    false`) is compacted too. `len(items)` means there is nothing older to compact."""
    start = len(items)
    while start > 0 and _from_client(items[start - 1]):
        start -= 1
    while start > 0:
        kept = items[start:]
        calls = {item.get("call_id") for item in kept if item.get("type") in _OUTPUTS.values()}
        needed = {item.get("call_id") for item in kept if item.get("type") in _OUTPUTS} - calls
        if not needed:
            break
        start -= 1
    return len(items) - start


def _from_client(item: Item) -> bool:
    kind = item.get("type")
    return kind in _OUTPUTS or (kind == MESSAGE and item.get("role") != "assistant")


def compacted_output(items: Sequence[Item], compaction: Item) -> list[Item]:
    """`POST /v1/responses/compact`'s output: the user messages and the tool searches'
    outputs (what they loaded stays loaded; an `additional_tools` item is no output item the
    SDK knows, so it is not carried here), then the compaction item."""
    return [*(item for item in items if is_user_message(item)
              or item.get("type") == toolsearch.OUTPUT), compaction]


# -- the summarisation turn ----------------------------------------------------------------------
def summary_request(chat: dict[str, Any], max_model_len: int | None = None) -> dict[str, Any]:
    """The chat request that writes the summary of `chat` (a translated create): the same
    messages, tools and salt (the prefix cache), one instruction more, no tool calls, not
    streamed. At most `SUMMARY_MAX_TOKENS`, and at most a quarter of a known context, so a
    long prompt still leaves room for its summary."""
    limit = SUMMARY_MAX_TOKENS
    if max_model_len is not None:
        limit = max(min(limit, max_model_len // 4), 1)
    body: dict[str, Any] = {
        "model": chat["model"],
        "messages": [*chat["messages"], {"role": "user", "content": SUMMARY_INSTRUCTION}],
        "stream": False,
        "max_tokens": limit,
    }
    if chat.get("tools"):
        body["tools"] = chat["tools"]
        body["tool_choice"] = "none"
    if "cache_salt" in chat:  # the tenant's prefix-cache partition (core/policy/tenancy.py)
        body["cache_salt"] = chat["cache_salt"]
    return body


def summary_text(answer: Any) -> str | None:
    """The summary in a chat completion's answer; None when it holds none."""
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str):
        return None
    return content.strip() or None


# -- the stream ----------------------------------------------------------------------------------
def item_events(item: Item, output_index: int, take: Callable[[], int]) -> list[Event]:
    """A finished compaction item in a stream: added, compacting, done (`take` numbers them)."""
    return [
        {"type": "response.output_item.added", "sequence_number": take(),
         "output_index": output_index, "item": item},
        {"type": COMPACTING, "sequence_number": take(), "item_id": item["id"],
         "output_index": output_index},
        {"type": "response.output_item.done", "sequence_number": take(),
         "output_index": output_index, "item": item},
    ]


# -- the request of POST /v1/responses/compact ---------------------------------------------------
_COMPACT_FIELDS = frozenset({"model", "input", "instructions", "previous_response_id",
                             "prompt_cache_key", "prompt_cache_retention",
                             "prompt_cache_options", "image"})


@dataclass(frozen=True, slots=True)
class CompactBody:
    model: str
    input: Any  # parsed by core/request/items.py with the create's rules
    instructions: str | None
    previous_response_id: str | None
    ignored: tuple[str, ...] = ()


def parse_compact_body(body: dict[str, Any], *, strict: bool = False) -> CompactBody:
    """`strict` (`--params strict`): an unknown field is a 400, else it is ignored and named."""
    model = body.get("model")
    if model is None:
        raise bad("model", "Missing required parameter: 'model'.")
    if not isinstance(model, str) or not model:
        raise bad("model", "Invalid 'model': expected a non-empty string.")
    previous = opt_str(body, "previous_response_id", max_len=256)
    if body.get("input") is None and not previous:
        raise bad("input", "Missing required parameter: 'input' (or 'previous_response_id').")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions", "Invalid type for 'instructions': expected a string.")
    if body.get("prompt_cache_options") is not None:
        expect_object(body["prompt_cache_options"], "prompt_cache_options")
    ignored = tuple(key for key, value in body.items()
                    if key not in _COMPACT_FIELDS and value is not None)
    if strict and ignored:
        raise bad(ignored[0], f"Unknown parameter: '{ignored[0]}'.")
    return CompactBody(model, body.get("input"), instructions, previous, ignored)
