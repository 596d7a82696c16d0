"""`/v1/vector_stores` routes (the SDK's `client.vector_stores`, `.files`, `.file_batches`,
`.search`), each one service call (services/vectors/stores.py). The ones that store or make
the fleet work (a search embeds its query) count in the key's `rpm` (web/limiting.py)."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.request.paging import parse_page
from proxy.services.vectors.stores import VectorStores
from proxy.web.incoming import json_body, path_id, tenant
from proxy.web.limiting import metered_write, metering
from proxy.web.rendering import json_response
from proxy.web.state import state_of


def _stores(request: Request) -> VectorStores:
    return state_of(request).vector_stores


def _vs(request: Request) -> str:
    return path_id(request, "vector_store_id")


async def create(request: Request) -> Response:
    return await metered_write(request, functools.partial(_stores(request).create,
                                                          tenant(request)))


async def list_stores(request: Request) -> Response:
    return json_response(await _stores(request).list_stores(tenant(request),
                                                     parse_page(request.query_params)))


async def retrieve(request: Request) -> Response:
    return json_response(await _stores(request).retrieve(tenant(request), _vs(request)))


async def update(request: Request) -> Response:
    return await metered_write(request, functools.partial(
        _stores(request).update, tenant(request), _vs(request)))


async def delete(request: Request) -> Response:
    return json_response(await _stores(request).delete(tenant(request), _vs(request)))


async def search(request: Request) -> Response:
    """Counted in `rpm` (its query is embedded by the fleet); the embedding's tokens are
    charged to the key by the searcher (services/metering/embedding.py)."""
    body = await json_body(request)
    async with metering(request):
        return json_response(await _stores(request).search(tenant(request), _vs(request),
                                                           body))


async def create_file(request: Request) -> Response:
    return await metered_write(request, functools.partial(
        _stores(request).create_file, tenant(request), _vs(request)))


async def list_files(request: Request) -> Response:
    return json_response(await _stores(request).list_files(
        tenant(request), _vs(request), parse_page(request.query_params),
        request.query_params.get("filter") or None))


async def retrieve_file(request: Request) -> Response:
    return json_response(await _stores(request).retrieve_file(
        tenant(request), _vs(request), path_id(request, "file_id")))


async def delete_file(request: Request) -> Response:
    return json_response(await _stores(request).delete_file(
        tenant(request), _vs(request), path_id(request, "file_id")))


async def create_batch(request: Request) -> Response:
    return await metered_write(request, functools.partial(
        _stores(request).create_batch, tenant(request), _vs(request)))


async def retrieve_batch(request: Request) -> Response:
    return json_response(await _stores(request).retrieve_batch(
        tenant(request), _vs(request), path_id(request, "batch_id")))


async def batch_files(request: Request) -> Response:
    return json_response(await _stores(request).list_files(
        tenant(request), _vs(request), parse_page(request.query_params),
        request.query_params.get("filter") or None, path_id(request, "batch_id")))


_ONE = "/v1/vector_stores/{vector_store_id}"
routes = [
    Route("/v1/vector_stores", create, methods=["POST"]),
    Route("/v1/vector_stores", list_stores, methods=["GET"]),
    Route(_ONE, retrieve, methods=["GET"]),
    Route(_ONE, update, methods=["POST"]),
    Route(_ONE, delete, methods=["DELETE"]),
    Route(_ONE + "/search", search, methods=["POST"]),
    Route(_ONE + "/files", create_file, methods=["POST"]),
    Route(_ONE + "/files", list_files, methods=["GET"]),
    Route(_ONE + "/files/{file_id}", retrieve_file, methods=["GET"]),
    Route(_ONE + "/files/{file_id}", delete_file, methods=["DELETE"]),
    Route(_ONE + "/file_batches", create_batch, methods=["POST"]),
    Route(_ONE + "/file_batches/{batch_id}", retrieve_batch, methods=["GET"]),
    Route(_ONE + "/file_batches/{batch_id}/files", batch_files, methods=["GET"]),
]
