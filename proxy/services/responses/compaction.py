"""Compaction's I/O (the rules are core/compaction.py): the summarisation turn on the fleet and
the token count that decides an automatic compaction.

- `context()`: the chat request a create sends, its compaction items expanded; with
  `context_management` (or a `compaction_trigger`), the older context compacted first when the
  prompt (counted by the fleet's `/tokenize`, as services/responses/tokenize.py does) passes the
  threshold. Returns the new compaction item too, which the create puts first in its output.
- `compact()`: `POST /v1/responses/compact`'s work: the whole context summarised.

The summarisation turn is one non-streamed chat completion through the same fleet path as a
create (admission, replica choice with the chain's affinity, timeouts, error mapping): the
conversation as the create would send it plus one instruction (core/compaction.py). Its
answer is sealed with the fleet secret, so any instance opens it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from proxy.core.compaction import (
    DEFAULT_THRESHOLD_SHARE,
    ID_PREFIX,
    Summary,
    check_trigger,
    expand,
    make_item,
    open_summary,
    summary_request,
    summary_text,
    tail_length,
    without_triggers,
)
from proxy.core.errors import NotFound
from proxy.core.events.assembler import map_usage
from proxy.core.ids import IdFactory
from proxy.core.request.create import ResponsesRequest
from proxy.core.request.fields import bad
from proxy.core.seal import Sealer
from proxy.core.translate.chat import to_chat_request
from proxy.core.translate.effort import fit_effort
from proxy.core.translate.fleet_errors import in_responses_words
from proxy.core.types import Item
from proxy.services.fleet.gateway import Gateway
from proxy.services.responses.tokenize import measure
from proxy.upstream.client import bad_answer


@dataclasses.dataclass(frozen=True, slots=True)
class Compacted:
    """A compaction made: the item, the context it leaves, the summarisation turn's usage."""

    item: Item
    items: list[Item]
    usage: dict[str, Any] | None


class Compactor:
    def __init__(self, gateway: Gateway, sealer: Sealer, ids: IdFactory) -> None:
        self._gateway = gateway
        self._sealer = sealer
        self._ids = ids

    def opener(self, where: str = "input") -> Callable[[str], Summary]:
        sealer = self._sealer
        return lambda blob: open_summary(sealer, blob, where)

    def expanded(self, items: Sequence[Item]) -> list[Item]:
        return expand(items, self.opener())

    def chat(self, request: ResponsesRequest, items: list[Item]) -> dict[str, Any]:
        """The create's chat request over `items` (history and input already joined), its
        reasoning effort one the fleet's replicas of the model take."""
        chat = to_chat_request(dataclasses.replace(request, input=[]), items)
        return fit_effort(chat, self._gateway.fleet.efforts(request.model))

    async def context(self, tenant: str, request: ResponsesRequest, history: Sequence[Item], *,
                      compact: bool = True, affinity: str | None = None,
                      home: str | None = None) -> tuple[dict[str, Any], Compacted | None]:
        """(the chat request, the compaction made for it (its item first in the create's
        output, its summarisation turn's usage charged to the key) or None)."""
        trigger = check_trigger(request.input)
        if trigger and request.background:
            where = f"input[{len(request.input) - 1}]"
            raise bad(where, f"Invalid '{where}': a 'compaction_trigger' cannot be used with "
                             "background mode on this server.")
        inputs = without_triggers(request.input)
        items = self.expanded([*history, *inputs])
        chat = self.chat(request, items)
        if not compact or not (trigger or request.auto_compact):
            return chat, None
        tail = tail_length(items)
        if tail >= len(items):
            return chat, None  # only the newest turn: nothing older to compact
        if not trigger and not await self._over_threshold(request, chat, affinity):
            return chat, None
        done = await self._compact(tenant, request, items, tail, affinity=affinity, home=home)
        return self.chat(request, done.items), done

    async def compact(self, tenant: str, request: ResponsesRequest, history: Sequence[Item], *,
                      affinity: str | None = None, home: str | None = None) -> Compacted:
        """The whole context (history and input) summarised, for the compact endpoint."""
        items = self.expanded([*history, *without_triggers(request.input)])
        return await self._compact(tenant, request, items, 0, affinity=affinity, home=home)

    async def _over_threshold(self, request: ResponsesRequest, chat: dict[str, Any],
                              affinity: str | None) -> bool:
        try:
            seen = await measure(self._gateway, chat, affinity=affinity)
        except NotFound as exc:
            if exc.code == "model_not_found":
                raise
            return False  # a replica without /tokenize: we cannot tell, so nothing is compacted
        threshold = request.compact_threshold
        if threshold is None:
            threshold = int(seen.max_model_len * DEFAULT_THRESHOLD_SHARE)
        return seen.count > threshold

    async def _compact(self, tenant: str, request: ResponsesRequest, items: list[Item],
                       tail: int, *, affinity: str | None, home: str | None) -> Compacted:
        older = items[:len(items) - tail]
        text, usage = await self.summarise(tenant, self.chat(request, older),
                                           affinity=affinity, home=home)
        item = make_item(self._sealer, Summary(text, tail), self._ids(ID_PREFIX))
        return Compacted(item, self.expanded([*items, item]), usage)

    async def summarise(self, tenant: str, chat: dict[str, Any], *, affinity: str | None = None,
                        home: str | None = None) -> tuple[str, dict[str, Any] | None]:
        """(the summary the model wrote of `chat`'s conversation, the turn's Responses usage)."""
        model = chat["model"]
        body = summary_request(chat, self._gateway.fleet.max_model_len(model))
        with in_responses_words():  # the fleet's chat names, as the client's Responses ones
            call = await self._gateway.open(model, tenant, orjson.dumps(body), stream=False,
                                            affinity=affinity, home=home)
        content = await call.read_all()
        try:
            answer = orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise bad_answer(call.replica.url, "sent invalid JSON") from exc
        text = summary_text(answer)
        if text is None:
            raise bad_answer(call.replica.url, "wrote no summary")
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return text, map_usage(usage) if isinstance(usage, dict) else None
