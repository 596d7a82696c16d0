"""A Responses request (plus the history it continues) as one vLLM chat-completions request.

Mapping (docs/protocol.md §6.1):
    instructions                    → the first `system` message (never inherited from history)
    all system/developer text       → merged into that ONE leading system message, in order
                                      (core/translate/system_prompt.py: templates refuse a later
                                      one)
    message user/system/developer   → the same role (`developer` → `system`: many chat
                                      templates know no developer role); text-only content
                                      becomes a plain string, the widest-supported form
    message assistant               → `assistant` with its output text joined
    function_call (consecutive)     → tool_calls on ONE assistant message (joined to the
                                      assistant text right before it), as vLLM merges them
    function_call_output            → `tool` message with `tool_call_id`
    reasoning                       → `reasoning` on the next assistant message
    tools / tool_choice             → nested chat form; `allowed_tools` narrows the tool list;
                                      custom and namespace tools flattened (core/request/tools.py)
    custom_tool_call(_output), namespaced function_call → their flat function form
    text.format                     → response_format;  reasoning.effort → reasoning_effort
                                      (`max` as `xhigh`)
    reasoning.context current_turn  → earlier turns' reasoning items left out
    tool_search, deferred tools     → the search function; deferred ones only once loaded
    tool_search_call/_output        → the search function's call and its answer
    additional_tools                → their tools offered, no message
    max_output_tokens               → max_tokens
    include message.output_text.logprobs → logprobs: true, top_logprobs: top_logprobs or 0
The upstream call always streams with usage, whatever the client asked: one assembler serves
both paths, and usage is needed for the terminal event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from proxy.core.hosted import ITEM_TYPES as HOSTED_ITEM_TYPES
from proxy.core.hosted import hosted_messages
from proxy.core.mcp import ITEM_TYPES as MCP_ITEM_TYPES
from proxy.core.mcp import mcp_messages
from proxy.core.request.create import ResponsesRequest
from proxy.core.request.items import file_key, file_text, reasoning_text
from proxy.core.tools.toolnames import ToolNames, flatten_history, upstream_tools
from proxy.core.tools.toolsearch import count_deferred, loaded_tools, searchable
from proxy.core.translate.system_prompt import lead_with_system
from proxy.core.types import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE, REASONING, Item

Message = dict[str, Any]


def to_chat_request(request: ResponsesRequest, history: Iterable[Item]) -> dict[str, Any]:
    messages: list[Message] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    items = [*history, *request.input]
    # Tools a search loaded or an `additional_tools` item brought, earlier in the chain or
    # in this input (core/tools/toolsearch.py): offered beside the request's own.
    loaded = loaded_tools(items)
    names = ToolNames([*request.tools, *loaded])
    context = (request.reasoning or {}).get("context")
    if context == "current_turn":
        items = current_turn_reasoning(items)
    messages += to_messages(flatten_history(items, names), request.media)
    chat: dict[str, Any] = {
        "model": request.model,
        "messages": lead_with_system(messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    # Request fields sent upstream as they are, when given, under their chat names: read as
    # attributes, not by name with `getattr` (six calls a create)
    for name, value in (("max_tokens", request.max_output_tokens),
                        ("temperature", request.temperature), ("top_p", request.top_p),
                        ("user", request.user), ("presence_penalty", request.presence_penalty),
                        ("frequency_penalty", request.frequency_penalty)):
        if value is not None:
            chat[name] = value
    _add_tools(chat, request, names, loaded, items)
    response_format = _response_format(request.text_format)
    if response_format is not None:
        chat["response_format"] = response_format
    effort = (request.reasoning or {}).get("effort")
    if effort is not None:
        # `max` is the top of the scale, past `xhigh`, which no chat fleet knows: it goes
        # as `xhigh`, then as the nearest effort the replica takes (effort.py `fit_effort`).
        chat["reasoning_effort"] = "xhigh" if effort == "max" else effort
    if request.logprobs:  # vLLM's shape: the flag, and how many alternatives per token
        chat["logprobs"] = True
        chat["top_logprobs"] = request.top_logprobs or 0
    if request.cache_salt is not None:
        chat["cache_salt"] = request.cache_salt
    return chat


def to_messages(items: Iterable[Item], media: Mapping[str, str] | None = None, *,
                hosted: Mapping[str, tuple[str, str, str, str]] | None = None
                ) -> list[Message]:
    """`media`: image URL → the data: URL to send in its place (services/fleet/media.py).
    `hosted`: a hosted call's item id → (call id, function name, arguments, the tool's answer)
    for the calls the tool loop ran in this response (core/hosted.py); a hosted item of an
    earlier response is not sent again (the answer that followed it carries what it found)."""
    media = media or {}
    hosted = hosted or {}
    messages: list[Message] = []
    pending_reasoning: list[str] = []
    for item in items:
        kind = item["type"]
        if kind == REASONING:
            text = reasoning_text(item)
            if text:
                pending_reasoning.append(text)
            continue
        if kind == MESSAGE and item["role"] != "assistant":
            messages.append({"role": _role(item["role"]),
                             "content": _content(item["content"], media)})
        elif kind == MESSAGE:
            assistant: Message = {"role": "assistant", "content": _assistant_text(item)}
            messages.append(assistant)
        elif kind == FUNCTION_CALL:
            assistant = _open_assistant(messages)
            assistant.setdefault("tool_calls", []).append({
                "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            })
        elif kind == FUNCTION_CALL_OUTPUT:
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _tool_content(item["output"], media)})
        elif kind in MCP_ITEM_TYPES:
            mcp_messages(item, messages)
        elif kind in HOSTED_ITEM_TYPES and item["id"] in hosted:
            hosted_messages(*hosted[item["id"]], messages)
        if pending_reasoning and messages and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning"] = "\n".join(pending_reasoning)
            pending_reasoning = []
    _name_tool_results(messages)
    return messages


def current_turn_reasoning(items: list[Item]) -> list[Item]:
    """`reasoning.context: "current_turn"`: the reasoning items after the last user message
    only; the earlier turns' reasoning is not shown to the model again."""
    last_user = max((i for i, item in enumerate(items)
                     if item["type"] == MESSAGE and item.get("role") == "user"), default=-1)
    return [item for i, item in enumerate(items) if i > last_user or item["type"] != REASONING]


def _name_tool_results(messages: list[Message]) -> None:
    """Give each `tool` message the `name` of the function it answers: gpt-oss chat templates
    up to ~vLLM 0.11.1 take the tool result's author from it (no name: a broken prompt)."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls", ()):
            names[call["id"]] = call["function"]["name"]
        if message["role"] == "tool" and message["tool_call_id"] in names:
            message["name"] = names[message["tool_call_id"]]


def _role(role: str) -> str:
    return "system" if role == "developer" else role


def _open_assistant(messages: list[Message]) -> Message:
    """The assistant message a function call joins: the last message if it is the assistant's
    (its text, or the calls before this one), else a new one with empty content: vLLM 0.10.1
    refuses `content: null` beside tool_calls ('Error in preprocessing prompt inputs')."""
    if messages and messages[-1]["role"] == "assistant":
        return messages[-1]
    message: Message = {"role": "assistant", "content": ""}
    messages.append(message)
    return message


def _assistant_text(item: Item) -> str:
    return "".join(
        str(part.get("text", part.get("refusal", ""))) for part in item["content"]
    )


def _content(parts: list[dict[str, Any]], media: Mapping[str, str] | None = None
             ) -> str | list[dict[str, Any]]:
    converted = [_part(p, media or {}) for p in parts]
    if all(p["type"] == "text" for p in converted):
        return "".join(p["text"] for p in converted)
    return converted


def _part(part: dict[str, Any], media: Mapping[str, str]) -> dict[str, Any]:
    kind = part["type"]
    if kind == "input_image":
        url = part["image_url"]
        return {"type": "image_url",
                "image_url": {"url": media.get(url, url), "detail": part.get("detail", "auto")}}
    if kind == "input_file":
        # Resolved before translation (services/responses/inputs.py); inline data is read here
        # when it was not (a path that resolves nothing).
        text = media.get(file_key(part))
        if text is None:
            text = file_text(str(part.get("file_data", "")), "input_file.file_data")
        name = part.get("filename")
        header = f"[file: {name}]\n" if name else ""
        return {"type": "text", "text": header + text}
    return {"type": "text", "text": part.get("text", "")}


def _tool_content(output: str | list[dict[str, Any]], media: Mapping[str, str]
                  ) -> str | list[dict[str, Any]]:
    return output if isinstance(output, str) else _content(output, media)


def _add_tools(chat: dict[str, Any], request: ResponsesRequest, names: ToolNames,
               loaded: list[dict[str, Any]], items: list[Item]) -> None:
    if not request.tools and not loaded:
        # No tool at all (names too are empty: no search function either): nothing is
        # offered, whatever `tool_choice` says. The walk below found that out in ~3 µs.
        return
    deferred = count_deferred(searchable(request.tools, items))
    tools, choice = upstream_tools(request.tools, request.tool_choice, names, loaded, deferred)
    if not tools:  # none, or only ones `allowed_tools` left out
        return
    chat["tools"] = tools
    chat["tool_choice"] = choice
    chat["parallel_tool_calls"] = request.parallel_tool_calls


def _response_format(fmt: dict[str, Any]) -> dict[str, Any] | None:
    kind = fmt["type"]
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        return None
    schema: dict[str, Any] = {"name": fmt["name"], "schema": fmt["schema"]}
    if fmt.get("strict") is not None:
        schema["strict"] = fmt["strict"]
    if fmt.get("description") is not None:
        schema["description"] = fmt["description"]
    return {"type": "json_schema", "json_schema": schema}
