"""The Conversations API (docs/protocol.md §4.7): a conversation is a stored, ordered list of items
that `conversation=` on a response reads as history and extends with the turn's input and
output. Items added here are checked exactly like a response's `input`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proxy.core import ids as idp
from proxy.core.errors import NotFound
from proxy.core.ids import IdFactory, new_id
from proxy.core.request.fields import at, bad, check_metadata, expect_list
from proxy.core.request.items import parse_item
from proxy.core.request.paging import PageRequest, list_body
from proxy.core.seal import Sealer
from proxy.core.types import Item
from proxy.settings import StoreSettings
from proxy.store.base import Store

# OpenAI's limit on items per create / add call.
MAX_ITEMS_PER_CALL = 20


class Conversations:
    def __init__(self, store: Store, lifetimes: StoreSettings, sealer: Sealer, *,
                 clock: Callable[[], float] = time.time, ids: IdFactory = new_id) -> None:
        self._store = store
        self._ttl = lifetimes.response_ttl
        self._clock = clock
        self._ids = ids
        self._sealer = sealer

    @staticmethod
    def _missing(conversation_id: str) -> NotFound:
        return NotFound(f"Conversation with id '{conversation_id}' not found.",
                        param="conversation_id")

    def _items(self, value: Any, *, required: bool) -> list[Item]:
        if value is None and not required:
            return []
        if value is None:
            raise bad("items", "Missing required parameter: 'items'.")
        raw = expect_list(value, "items")
        if len(raw) > MAX_ITEMS_PER_CALL:
            raise bad("items", f"Invalid 'items': too many items ({len(raw)}); at most "
                               f"{MAX_ITEMS_PER_CALL} per call.")
        return [parse_item(item, self._ids, at("items", i), self._sealer)
                for i, item in enumerate(raw)]

    async def create(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        items = self._items(body.get("items"), required=False)
        conversation = {
            "id": self._ids(idp.CONVERSATION),
            "object": "conversation",
            "created_at": int(self._clock()),
            "metadata": check_metadata(body.get("metadata")),
        }
        await self._store.create_conversation(tenant, conversation, items, ttl=self._ttl)
        return conversation

    async def get(self, tenant: str, conversation_id: str) -> dict[str, Any]:
        conversation = await self._store.get_conversation(tenant, conversation_id)
        if conversation is None:
            raise self._missing(conversation_id)
        return conversation

    async def update(self, tenant: str, conversation_id: str,
                     body: dict[str, Any]) -> dict[str, Any]:
        if "metadata" not in body:
            raise bad("metadata", "Missing required parameter: 'metadata'.")
        metadata = check_metadata(body.get("metadata"))
        conversation = await self._store.update_conversation(tenant, conversation_id, metadata,
                                                             ttl=self._ttl)
        if conversation is None:
            raise self._missing(conversation_id)
        return conversation

    async def delete(self, tenant: str, conversation_id: str) -> dict[str, Any]:
        if not await self._store.delete_conversation(tenant, conversation_id):
            raise self._missing(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    async def add_items(self, tenant: str, conversation_id: str,
                        body: dict[str, Any]) -> dict[str, Any]:
        items = self._items(body.get("items"), required=True)
        if not await self._store.add_conversation_items(tenant, conversation_id, items,
                                                        ttl=self._ttl):
            raise self._missing(conversation_id)
        return list_body(items, False)

    async def list_items(self, tenant: str, conversation_id: str,
                         page: PageRequest) -> dict[str, Any]:
        result = await self._store.list_conversation_items(
            tenant, conversation_id, after=page.after, limit=page.limit, order=page.order)
        if result is None:
            raise self._missing(conversation_id)
        return list_body(result.items, result.has_more)

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item:
        await self.get(tenant, conversation_id)
        item = await self._store.get_conversation_item(tenant, conversation_id, item_id)
        if item is None:
            raise NotFound(f"Item with id '{item_id}' not found.", param="item_id")
        return item

    async def delete_item(self, tenant: str, conversation_id: str,
                          item_id: str) -> dict[str, Any]:
        conversation = await self.get(tenant, conversation_id)
        if not await self._store.delete_conversation_item(tenant, conversation_id, item_id):
            raise NotFound(f"Item with id '{item_id}' not found.", param="item_id")
        return conversation
