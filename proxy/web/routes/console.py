"""`/console`: the operator's pages (plain HTML, CSS and JavaScript in the package, no build
step, no external asset), and the `/admin/` reads they make: the fleet, the job queue, a job's
cancel, one response opened by id and its event stream replayed (`starting_after`).

The pages load without the admin key and show nothing until the operator pastes it (kept in
the tab's sessionStorage); every datum comes from an admin call
(web/middleware/admin_auth.py: 404 with no `--admin-key`, 401/403 otherwise, each call logged
with the admin identity). The pages carry a
content security policy of 'self' only: no inline script, nothing from elsewhere. Any instance
serves any page: the state they read is the store's (the fleet view is the answering
process's, which probes the same fleet as every other).
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import InvalidRequest, NotFound
from proxy.web.incoming import path_id
from proxy.web.middleware.admin_auth import require_admin, ring_of
from proxy.web.rendering import Reply, json_response, stream_response
from proxy.web.state import state_of

FILES = {"": ("index.html", "text/html; charset=utf-8"),
         "console.css": ("console.css", "text/css; charset=utf-8"),
         "console.js": ("console.js", "text/javascript; charset=utf-8")}
HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


async def page(request: Request) -> Response:
    if not ring_of(request).admin_enabled:
        raise NotFound(f"Not found: {request.url.path[:100]}")
    name = request.path_params.get("name", "")
    if name not in FILES:
        raise NotFound(f"Not found: {request.url.path[:100]}")
    filename, kind = FILES[name]
    body = resources.files("proxy.web.console").joinpath(filename).read_bytes()
    return Response(body, media_type=kind, headers=HEADERS)


async def fleet(request: Request) -> Response:
    require_admin(request)
    return json_response(state_of(request).console.fleet())


async def jobs(request: Request) -> Response:
    require_admin(request)
    return json_response(await state_of(request).console.jobs())


async def cancel(request: Request) -> Response:
    require_admin(request)
    return json_response(await state_of(request).console.cancel(
        path_id(request, "response_id")))


async def inspect(request: Request) -> Response:
    require_admin(request)
    return json_response(await state_of(request).console.inspect(
        path_id(request, "response_id")))


async def events(request: Request) -> Reply:
    require_admin(request)
    state = state_of(request)
    record = await state.console.record(path_id(request, "response_id"))
    raw = request.query_params.get("starting_after")
    after = -1
    if raw:
        if not raw.isdigit():
            raise InvalidRequest("Invalid 'starting_after': it must be 0 or more.",
                                 param="starting_after")
        after = int(raw)
    stream = state.console.events(record, after)
    return stream_response(stream, ping=state.streams.ping_interval)


routes = [
    Route("/console", page, methods=["GET"]),
    Route("/console/{name}", page, methods=["GET"]),
    Route("/admin/fleet", fleet, methods=["GET"]),
    Route("/admin/jobs", jobs, methods=["GET"]),
    Route("/admin/jobs/{response_id}/cancel", cancel, methods=["POST"]),
    Route("/admin/responses/{response_id}", inspect, methods=["GET"]),
    Route("/admin/responses/{response_id}/events", events, methods=["GET"]),
]
