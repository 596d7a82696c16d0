"""`/v1/conversations` routes (docs/protocol.md §4.7), each one service call. The ones that store
(create, update, add items) count in the key's `rpm` (web/limiting.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.request.paging import parse_page
from proxy.web.incoming import json_body, path_id, tenant
from proxy.web.limiting import metering
from proxy.web.rendering import json_response
from proxy.web.state import state_of


def _ids(request: Request) -> tuple[str, str]:
    return tenant(request), path_id(request, "conversation_id")


async def create(request: Request) -> Response:
    body = await json_body(request)
    async with metering(request):
        made = await state_of(request).conversations.create(tenant(request), body)
    return json_response(made)


async def retrieve(request: Request) -> Response:
    return json_response(await state_of(request).conversations.get(*_ids(request)))


async def update(request: Request) -> Response:
    body = await json_body(request)
    async with metering(request):
        updated = await state_of(request).conversations.update(*_ids(request), body)
    return json_response(updated)


async def delete(request: Request) -> Response:
    return json_response(await state_of(request).conversations.delete(*_ids(request)))


async def add_items(request: Request) -> Response:
    body = await json_body(request)
    async with metering(request):
        added = await state_of(request).conversations.add_items(*_ids(request), body)
    return json_response(added)


async def list_items(request: Request) -> Response:
    page = parse_page(request.query_params)
    conversations = state_of(request).conversations
    return json_response(await conversations.list_items(*_ids(request), page))


async def get_item(request: Request) -> Response:
    return json_response(await state_of(request).conversations.get_item(
        *_ids(request), path_id(request, "item_id")))


async def delete_item(request: Request) -> Response:
    return json_response(await state_of(request).conversations.delete_item(
        *_ids(request), path_id(request, "item_id")))


_ONE = "/v1/conversations/{conversation_id}"
routes = [
    Route("/v1/conversations", create, methods=["POST"]),
    Route(_ONE, retrieve, methods=["GET"]),
    Route(_ONE, update, methods=["POST"]),
    Route(_ONE, delete, methods=["DELETE"]),
    Route(_ONE + "/items", list_items, methods=["GET"]),
    Route(_ONE + "/items", add_items, methods=["POST"]),
    Route(_ONE + "/items/{item_id}", get_item, methods=["GET"]),
    Route(_ONE + "/items/{item_id}", delete_item, methods=["DELETE"]),
]
