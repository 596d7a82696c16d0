"""`POST /tokenize`, as vLLM serves it (`TokenizeChatRequest` / `TokenizeCompletionRequest` in
→ `TokenizeResponse {count, max_model_len, tokens, token_strs}` out).

The count is exactly what a chat request with the same `messages` and `tools` reports as
`usage.prompt_tokens` (tokens.prompt_tokens), so a proxy that measures a prompt here and then
sends it sees the same number in the usage. `add_generation_prompt` and the other template knobs
are accepted and change nothing (the reply header is always counted, as usage counts it). The
token ids are positions (0, 1, 2, ...): nothing may read meaning into them. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from proxy.simulator import tokens
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import invalid, model_not_found
from proxy.simulator.request import parse_messages


def tokenize(body: Any, config: SimConfig) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary or object to extract fields from")
    model = body.get("model")
    if model is not None and model not in config.models:
        raise model_not_found(str(model))
    if "messages" in body:
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise invalid("`tools` should be a valid list", param="tools")
        count = tokens.prompt_tokens(parse_messages(body.get("messages")), tools)
    elif isinstance(body.get("prompt"), str):
        count = len(tokens.split(body["prompt"]))
    else:
        raise invalid("Field required: `messages` or `prompt`", param="messages")
    return {"count": count, "max_model_len": config.max_model_len, "tokens": list(range(count)),
            "token_strs": None}
