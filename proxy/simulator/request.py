"""A chat-completions request body, checked the way vLLM checks it, as a `ChatRequest`.

Order of checks (as in vLLM): the schema first (types, `stream_options` without `stream`,
`tool_choice` against `tools`), then the model, then what the server decides (n, max_tokens,
context length). Every failure is a `SimError` with vLLM's status and body. Pure: no I/O.

Defaults follow vLLM: `tool_choice` is "auto" when tools are given and "none" otherwise;
`stream_options` present means `include_usage` true unless it says false; a missing `model`
means the first served one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.simulator import tokens
from proxy.simulator.answer import directives
from proxy.simulator.answer.personas import GENERIC, Persona
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import bad_request, invalid, model_not_found, trailer

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_HINT = re.compile(r"([A-Za-z_][\w-]*)=(\S+)")

ToolMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    max_tokens: int | None = None
    tools: tuple[Tool, ...] = ()
    tool_mode: ToolMode = "none"
    tool_name: str | None = None  # the function a named tool_choice asks for
    parallel_tool_calls: bool = True
    response_format: str = "text"  # text | json_object | json_schema
    json_schema: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    include_reasoning: bool = True
    text: str = ""  # the last user message: directives removed, whitespace collapsed
    directives: directives.Directives = field(default_factory=directives.Directives)
    prompt_tokens: int = 0
    cache_salt: str | None = None  # partitions the prefix cache (prefixcache.py)
    persona: Persona = GENERIC  # what the served model sends (personas.py)
    return_token_ids: bool = False  # vLLM's extension: token ids on the chunks (0.32 shapes)

    @property
    def hints(self) -> dict[str, str]:
        """`name=value` pairs in the user's text: string values for tool arguments."""
        return dict(_HINT.findall(self.text))


def parse_chat(body: Any, config: SimConfig) -> ChatRequest:
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary or object to extract fields from")
    messages = _messages(body.get("messages"))
    stream = _optional(body, "stream", bool) or False
    stream_options = _optional(body, "stream_options", dict)
    if stream_options and not stream:
        raise invalid("Stream options can only be defined when `stream=True`.")
    tools = _tools(body.get("tools"))
    named = config.persona_for(_optional(body, "model", str) or config.models[0])
    mode, name = _tool_choice(body, tools, named.since_032)
    if body.get("tool_choice") == "auto" and not config.auto_tool_choice:
        raise invalid('"auto" tool choice requires --enable-auto-tool-choice and '
                      "--tool-call-parser to be set")
    fmt, schema = _response_format(body.get("response_format"))
    model = _model(body, config, named.since_032)
    persona = config.persona_for(model)
    effort = _effort(body.get("reasoning_effort"), persona)
    _check_history(messages, persona)
    max_tokens = _max_tokens(body)
    raw_text = _last_user_text(messages)
    try:
        found = directives.parse(raw_text)
    except directives.DirectiveError as exc:
        raise bad_request(str(exc), param="messages") from None
    prompt = tokens.prompt_tokens(messages, body.get("tools"))
    if persona.since_032:
        _check_context_032(prompt, max_tokens, config.max_model_len)
    else:
        _check_context(prompt, max_tokens, config.max_model_len)
    options = stream_options or {}
    return ChatRequest(
        model=model, messages=messages, stream=stream,
        include_usage=stream and stream_options is not None
        and options.get("include_usage", True) is not False,
        continuous_usage=stream and options.get("continuous_usage_stats") is True,
        max_tokens=max_tokens, tools=tools, tool_mode=mode, tool_name=name,
        parallel_tool_calls=_optional(body, "parallel_tool_calls", bool) is not False,
        response_format=fmt, json_schema=schema,
        reasoning_effort=effort,
        include_reasoning=_optional(body, "include_reasoning", bool) is not False,
        text=directives.strip(raw_text), directives=found, prompt_tokens=prompt,
        cache_salt=_cache_salt(body), persona=persona,
        return_token_ids=_optional(body, "return_token_ids", bool) is True,
    )


def _cache_salt(body: dict[str, Any]) -> str | None:
    """vLLM's check (its `check_cache_salt_support`): a non-empty string when given."""
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise invalid("Parameter 'cache_salt' must be a non-empty string if provided.",
                      param="cache_salt")
    return salt


def _optional(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is not None and (not isinstance(value, kind) or
                              (kind is not bool and isinstance(value, bool))):
        raise invalid(f"`{key}` should be a valid {kind.__name__}", param=key)
    return value


def parse_messages(value: Any) -> list[dict[str, Any]]:
    """A `messages` list checked as vLLM's schema checks it (chat and /tokenize share it)."""
    return _messages(value)


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise invalid("Field required: `messages`", param="messages")
    if not isinstance(value, list):
        raise invalid("`messages` should be a valid list", param="messages")
    if not value:
        raise bad_request("`messages` must contain at least one message", param="messages")
    for message in value:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise invalid(f"each message needs a `role`, one of {', '.join(ROLES)}",
                          param="messages")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise invalid("message `content` should be a string or a list of parts",
                          param="messages")
        if isinstance(content, list) and not all(isinstance(p, dict) for p in content):
            raise invalid("each content part should be an object", param="messages")
    return value


def _model(body: dict[str, Any], config: SimConfig, since_032: bool = False) -> str:
    model = _optional(body, "model", str)
    if model is None:
        return config.models[0]
    if model not in config.models:
        raise model_not_found(model, config.models if since_032 else None)
    return str(model)


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = _optional(body, "max_completion_tokens", int)
    if value is None:
        value = _optional(body, "max_tokens", int)
    n = _optional(body, "n", int)
    if n is not None and n != 1:
        raise bad_request("n > 1 is not supported by the simulator", param="n")
    if value is not None and value < 1:
        raise bad_request(f"max_tokens must be at least 1, got {value}.", param="max_tokens")
    return int(value) if value is not None else None


def _check_context(prompt: int, max_tokens: int | None, limit: int) -> None:
    asked = prompt + (max_tokens or 0)
    if asked > limit or prompt >= limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{asked} tokens ({prompt} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion."
        )


def _check_context_032(prompt: int, max_tokens: int | None, limit: int) -> None:
    """vLLM 0.32: max_tokens alone past the context, or a prompt that leaves no room, is a 400
    naming the field; a prompt + max_tokens past it is accepted (the answer stops at the
    context: script.py's budget). vLLM counts the prompt only up to the context + 1."""
    if max_tokens is not None and max_tokens > limit:
        raise bad_request(
            f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please "
            f"request fewer output tokens.{trailer('max_tokens', max_tokens)}",
            param="max_tokens")
    if prompt >= limit:
        seen = min(prompt, limit + 1)
        raise bad_request(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains at least {seen} input tokens, which exceeds this limit even without any "
            f"output tokens. Please reduce the length of the input prompt."
            f"{trailer('input_tokens', seen)}", param="input_tokens")


def _tools(value: Any) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("`tools` should be a valid list", param="tools")
    out: list[Tool] = []
    for tool in value:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid("each tool needs `function.name`", param="tools")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise invalid("`function.parameters` should be an object", param="tools")
        description = function.get("description")
        out.append(Tool(function["name"], parameters or {},
                        description if isinstance(description, str) else ""))
    return tuple(out)


def _tool_choice(body: dict[str, Any], tools: tuple[Tool, ...],
                 since_032: bool = False) -> tuple[ToolMode, str | None]:
    choice = body.get("tool_choice")
    if choice is None:
        return ("auto" if tools else "none"), None
    if choice == "none":
        return "none", None
    if not tools:
        raise invalid("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if choice in ("auto", "required"):
        return choice, None
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise invalid("`tool_choice` should be none, auto, required or a named function",
                      param="tool_choice")
    if name not in {tool.name for tool in tools}:
        message = "The tool specified in `tool_choice` does not match any of the specified " \
                  "`tools`"
        if since_032:  # checked while serving there, no longer by the schema
            raise bad_request(message + trailer("tool_choice"), param="tool_choice")
        raise invalid(message, param="tool_choice")
    return "named", name


def _response_format(value: Any) -> tuple[str, dict[str, Any]]:
    if value is None:
        return "text", {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise invalid("`response_format.type` should be text, json_object or json_schema",
                      param="response_format")
    if kind != "json_schema":
        return str(kind), {}
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise invalid("`response_format.json_schema` needs a `name`", param="response_format")
    schema = spec.get("schema")
    return "json_schema", schema if isinstance(schema, dict) else {"type": "object"}


def _effort(value: Any, persona: Persona) -> str | None:
    accepted = persona.efforts or EFFORTS
    if value is not None and value not in accepted:
        # vLLM 0.10's schema (Literal low/medium/high), and gpt-oss's template in every version
        raise invalid(f"`reasoning_effort` should be one of {', '.join(accepted)}",
                      param="reasoning_effort")
    return value if value is None else str(value)


def _check_history(messages: list[dict[str, Any]], persona: Persona) -> None:
    """gpt-oss on vLLM 0.10.x: the harmony renderer fails on an assistant message whose content
    is null beside tool_calls, and vLLM answers with its preprocessing failure."""
    if not persona.null_content_history_400:
        return
    for message in messages:
        if (message.get("role") == "assistant" and message.get("tool_calls")
                and message.get("content") is None):
            raise bad_request("Error in preprocessing prompt inputs: 'NoneType' object is not "
                              "iterable (an assistant message with tool_calls and null content)")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return tokens.content_text(message.get("content"))
    return ""
