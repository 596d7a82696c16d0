"""The model's context, measured by the fleet: `POST /tokenize` on exactly the messages and
tools a create sends (vLLM's TokenizeChatRequest `{model, messages, tools?}` →
`{count, max_model_len, tokens}`), for `POST /v1/responses/input_tokens` and for
`truncation: "auto"` (core/translate/truncation.py decides what to drop).

Truncation costs one /tokenize round trip when the prompt fits, and at most `MAX_ROUNDS` when it
does not (measure, drop by estimate, measure again); requests with `truncation: "disabled"` never
come here. If the prompt still does not fit after that, or nothing more can be dropped, it is
sent as it is and the replica's own refusal becomes the client's 400
`context_length_exceeded`. A replica without `/tokenize` (404) is treated the same way:
nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import NotFound
from proxy.core.translate.truncation import shorten
from proxy.services.fleet.gateway import Gateway
from proxy.upstream.client import bad_answer

TOKENIZE_PATH = "/tokenize"
MAX_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class Measure:
    count: int
    max_model_len: int


async def measure(gateway: Gateway, chat: dict[str, Any], *,
                  affinity: str | None = None) -> Measure:
    """The prompt tokens of `chat` (a translated create) as its model's replica counts them
    (not admitted: services/fleet/gateway.py `unqueued`)."""
    body: dict[str, Any] = {"model": chat["model"], "messages": chat["messages"]}
    if chat.get("tools"):
        body["tools"] = chat["tools"]
    call = await gateway.unqueued(chat["model"], TOKENIZE_PATH, orjson.dumps(body),
                                  affinity=affinity)
    content = await call.read_all()
    try:
        answer = orjson.loads(content)
        count, limit = answer["count"], answer.get("max_model_len")
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise bad_answer(call.replica.url, "sent no token count") from exc
    known = gateway.fleet.max_model_len(chat["model"])
    limit = known if known is not None else limit
    if not isinstance(count, int) or not isinstance(limit, int):
        raise bad_answer(call.replica.url, "sent no token count")
    return Measure(count, limit)

async def fit(gateway: Gateway, chat: dict[str, Any], *, reserve: int | None,
              affinity: str | None = None) -> dict[str, Any]:
    """`chat` with its oldest messages dropped until the prompt leaves `reserve` tokens (the
    request's max_output_tokens; at least one) of the model's context free."""
    messages = chat["messages"]
    for _ in range(MAX_ROUNDS):
        try:
            seen = await measure(gateway, {**chat, "messages": messages}, affinity=affinity)
        except NotFound as exc:
            if exc.code == "model_not_found":
                raise
            break  # a server without /tokenize: send the prompt as it is, it decides
        budget = seen.max_model_len - max(reserve or 1, 1)
        shorter = shorten(messages, chat.get("tools"), seen.count, budget)
        if shorter is messages:
            break
        messages = shorter
    return chat if messages is chat["messages"] else {**chat, "messages": messages}
