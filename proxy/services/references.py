"""Resolving a request's `item_reference` inputs against the caller's stored items (one
`Store.find_items` call: two pipelined reads however many references; core/references.py does
the rest). A request without references never touches the store here."""

from __future__ import annotations

import dataclasses

from proxy.core.references import referenced_ids, resolve
from proxy.core.request import ResponsesRequest
from proxy.store.base import Store


async def resolve_references(store: Store, tenant: str,
                             request: ResponsesRequest) -> ResponsesRequest:
    ids = referenced_ids(request.input)
    if not ids:
        return request
    found = await store.find_items(tenant, ids)
    return dataclasses.replace(request, input=resolve(request.input, found))
