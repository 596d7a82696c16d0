"""A WebSocket connection's memory of its last responses, so `store: false` chains continue.

The Responses WebSocket mode promises that `previous_response_id` works for responses made
earlier on the same connection even when nothing was stored. The chain a stored response would
give (`Store.load_chain`) is kept here instead, bounded, and only for the connection's lifetime.
"""

from __future__ import annotations

from collections import OrderedDict

from proxy.core import types as t
from proxy.core.types import Item, ResponseObject
from proxy.store.base import Chain

DEFAULT_KEPT = 8


class LocalChains:
    """The chains of the last `kept` finished responses of one connection, newest last."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self._kept = kept
        self._chains: OrderedDict[str, Chain] = OrderedDict()

    def get(self, response_id: str) -> Chain | None:
        return self._chains.get(response_id)

    def remember(self, final: ResponseObject, history: list[Item], parents: tuple[str, ...],
                 inputs: list[Item], replica: str | None) -> None:
        # A failed response is no context to continue from (as a stored one would not be).
        if final.get("status") not in (t.S_COMPLETED, t.S_INCOMPLETE):
            return
        response_id = final["id"]
        self._chains[response_id] = Chain(
            items=[*history, *inputs, *(final.get("output") or [])],
            parents=(*parents, response_id), model=final.get("model"), replica=replica)
        while len(self._chains) > self._kept:
            self._chains.popitem(last=False)

    def evict(self, response_id: str) -> None:
        self._chains.pop(response_id, None)

    def __len__(self) -> int:
        return len(self._chains)
