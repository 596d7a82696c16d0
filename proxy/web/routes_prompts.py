"""`/v1/prompts` routes (prompt templates, services/responses/prompts.py), each one service
call. The ones that store (create, a new version) count in the key's `rpm` (web/limiting.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.request.paging import parse_page
from proxy.web.incoming import json_body, path_id, tenant
from proxy.web.limiting import metering
from proxy.web.rendering import json_response
from proxy.web.state import runtime_of


def _ids(request: Request) -> tuple[str, str]:
    return tenant(request), path_id(request, "prompt_id")


async def create(request: Request) -> Response:
    body = await json_body(request)
    async with metering(request):
        made = await runtime_of(request).services.prompts.create(tenant(request), body)
    return json_response(made)


async def new_version(request: Request) -> Response:
    body = await json_body(request)
    async with metering(request):
        made = await runtime_of(request).services.prompts.update(*_ids(request), body)
    return json_response(made)


async def retrieve(request: Request) -> Response:
    version = request.query_params.get("version") or None
    return json_response(await runtime_of(request).services.prompts.get(*_ids(request),
                                                                         version))


async def list_prompts(request: Request) -> Response:
    page = parse_page(request.query_params)
    return json_response(await runtime_of(request).services.prompts.list(tenant(request), page))


async def delete(request: Request) -> Response:
    return json_response(await runtime_of(request).services.prompts.delete(*_ids(request)))


_ONE = "/v1/prompts/{prompt_id}"
routes = [
    Route("/v1/prompts", create, methods=["POST"]),
    Route("/v1/prompts", list_prompts, methods=["GET"]),
    Route(_ONE, retrieve, methods=["GET"]),
    Route(_ONE, new_version, methods=["POST"]),
    Route(_ONE, delete, methods=["DELETE"]),
]
