"""`/v1/prompts` routes (prompt templates, services/responses/prompts.py), each one service
call. The ones that store (create, a new version) count in the key's `rpm` (web/limiting.py)."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.request.paging import parse_page
from proxy.services.responses.prompts import Prompts
from proxy.web.incoming import path_id, tenant
from proxy.web.limiting import metered_write
from proxy.web.rendering import json_response
from proxy.web.state import state_of


def _prompts(request: Request) -> Prompts:
    return state_of(request).prompts


async def create(request: Request) -> Response:
    return await metered_write(request, functools.partial(_prompts(request).create,
                                                          tenant(request)))


async def new_version(request: Request) -> Response:
    return await metered_write(request, functools.partial(
        _prompts(request).update, tenant(request), path_id(request, "prompt_id")))


async def retrieve(request: Request) -> Response:
    version = request.query_params.get("version") or None
    return json_response(await _prompts(request).get(
        tenant(request), path_id(request, "prompt_id"), version))


async def list_prompts(request: Request) -> Response:
    return json_response(await _prompts(request).list(tenant(request),
                                                      parse_page(request.query_params)))


async def delete(request: Request) -> Response:
    return json_response(await _prompts(request).delete(tenant(request),
                                                        path_id(request, "prompt_id")))


_ONE = "/v1/prompts/{prompt_id}"
routes = [
    Route("/v1/prompts", create, methods=["POST"]),
    Route("/v1/prompts", list_prompts, methods=["GET"]),
    Route(_ONE, retrieve, methods=["GET"]),
    Route(_ONE, new_version, methods=["POST"]),
    Route(_ONE, delete, methods=["DELETE"]),
]
