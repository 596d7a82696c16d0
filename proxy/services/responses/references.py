"""The stored items a request's `item_reference` inputs name (one `Store.find_items` call: two
pipelined reads however many references); core/request/expansion.py resolves and counts them. A
request
without references never touches the store here."""

from __future__ import annotations

from proxy.core.request.create import ResponsesRequest
from proxy.core.request.references import referenced_ids
from proxy.core.types import Item
from proxy.store.base import Store


async def find_references(store: Store, tenant: str,
                          request: ResponsesRequest) -> dict[str, Item]:
    ids = referenced_ids(request.input)
    if not ids:
        return {}
    return await store.find_items(tenant, ids)
