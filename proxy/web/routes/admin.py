"""`/admin/keys`: client keys managed live (docs/contract.md "Operating it"), behind
`--admin-key` (web/middleware/admin_auth.py); and `GET /v1/usage`, a client key's own usage."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.request.jsonbody import parse_object
from proxy.services.admin import keys as ops
from proxy.web.incoming import path_id, tenant
from proxy.web.middleware.admin_auth import require_admin, ring_of
from proxy.web.rendering import json_response
from proxy.web.state import state_of


async def _body(request: Request) -> dict[str, Any]:
    return parse_object(await request.body())


async def create(request: Request) -> Response:
    require_admin(request)
    return json_response(await ops.create_key(ring_of(request), await _body(request)),
                         status=201)


async def list_keys(request: Request) -> Response:
    require_admin(request)
    usage_of = state_of(request).usage.of
    data = []
    for key in await ops.list_keys(ring_of(request)):
        usage = await usage_of(key.tenant)
        data.append({**key.public(), "usage": usage})
    return json_response({"object": "list", "data": data})


async def retrieve(request: Request) -> Response:
    require_admin(request)
    key = await ops.get_key(ring_of(request), path_id(request, "key_id"))
    return json_response(key.public())


async def update(request: Request) -> Response:
    require_admin(request)
    key = await ops.update_key(ring_of(request), path_id(request, "key_id"),
                               await _body(request))
    return json_response(key.public())


async def revoke(request: Request) -> Response:
    require_admin(request)
    return json_response(await ops.revoke_key(ring_of(request), path_id(request, "key_id")))


async def own_usage(request: Request) -> Response:
    return json_response(await state_of(request).usage.of(tenant(request)))


routes = [
    Route("/admin/keys", create, methods=["POST"]),
    Route("/admin/keys", list_keys, methods=["GET"]),
    Route("/admin/keys/{key_id}", retrieve, methods=["GET"]),
    Route("/admin/keys/{key_id}", update, methods=["PATCH"]),
    Route("/admin/keys/{key_id}", revoke, methods=["DELETE"]),
    Route("/v1/usage", own_usage, methods=["GET"]),
]
