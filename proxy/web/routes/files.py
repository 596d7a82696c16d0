"""`/v1/files` routes (the SDK's `client.files`), each one service call (services/files/files.py).

The upload is `multipart/form-data` (`file`, `purpose`, `expires_after[anchor|seconds]`), parsed
by Starlette (python-multipart): the file part is spooled to memory and, past 1 MiB, to a
temporary file, never more than the body limit lets in (web/middleware/bodylimits.py: the largest
file plus its framing, counted as it arrives), then copied to the store chunk by chunk. At most
`--max-uploads-in-flight` uploads are read at once, at most half of them for one key
(services/files/files.py `UploadSlots`), so the temporary files of one process stay within that
many times the largest file and one tenant cannot take every slot. On an open proxy
(no keys) a form post is what any web page can make a visitor's browser send, so an upload from
a foreign `Origin` is refused as a WebSocket handshake is (core/policy/origin.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.core.errors import ProxyError
from proxy.core.policy.origin import origin_allowed, parse_origin
from proxy.core.request.fields import bad
from proxy.core.request.paging import parse_page
from proxy.services.files.files import CHUNK_BYTES, Files, Upload
from proxy.web.incoming import path_id, tenant
from proxy.web.limiting import metering
from proxy.web.middleware.auth import OPEN
from proxy.web.rendering import json_response
from proxy.web.state import state_of

# Form fields besides the file: purpose and expires_after's two, with room for a client's
# extras; each at most a few bytes, so a small bound.
MAX_FIELDS = 8
MAX_FIELD_BYTES = 1024


def _ids(request: Request) -> tuple[str, str]:
    return tenant(request), path_id(request, "file_id")


def _check_origin(request: Request) -> None:
    if not request.scope.get("state", {}).get(OPEN):
        return
    allowed = frozenset(o for o in map(parse_origin,
                                       state_of(request).tenancy.allow_origins)
                        if o is not None)
    if not origin_allowed(request.headers.get("origin"), request.headers.get("host"), allowed):
        raise ProxyError("Uploads from another site's pages are refused by this server "
                         "(no API keys; see --allow-origin).", status=403, param="file")


async def _chunks(file: UploadFile) -> AsyncIterator[bytes]:
    await file.seek(0)
    while chunk := await file.read(CHUNK_BYTES):
        yield chunk


def _field(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad(name, f"Invalid '{name}': expected a text field, not a file.")
    return value


async def create(request: Request) -> Response:
    _check_origin(request)
    files = state_of(request).files
    # A slot before the body is read: the uploads in flight bound the spool's disk together,
    # and one key takes at most half of them.
    with files.uploads.held(tenant(request)):
        return await _upload(request, files)


async def _upload(request: Request, files: Files) -> Response:
    async with request.form(max_files=1, max_fields=MAX_FIELDS,
                            max_part_size=MAX_FIELD_BYTES) as form:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise bad("file", "Missing required parameter: 'file' (a multipart file part).")
        purpose = _field(form.get("purpose"), "purpose")
        if purpose is None:
            raise bad("purpose", "Missing required parameter: 'purpose'.")
        upload = Upload(filename=(file.filename or "file")[:512], purpose=purpose,
                        size=file.size or 0, chunks=_chunks(file),
                        expires_after=(_field(form.get("expires_after[anchor]"),
                                              "expires_after[anchor]"),
                                       _field(form.get("expires_after[seconds]"),
                                              "expires_after[seconds]")))
        async with metering(request):
            made = await files.upload(tenant(request), upload)
    return json_response(made)


async def list_files(request: Request) -> Response:
    page = parse_page(request.query_params)
    purpose = request.query_params.get("purpose") or None
    return json_response(await state_of(request).files.list(
        tenant(request), page, purpose))


async def retrieve(request: Request) -> Response:
    return json_response(await state_of(request).files.retrieve(*_ids(request)))


async def content(request: Request) -> Response:
    _, chunks = await state_of(request).files.content(*_ids(request))
    return StreamingResponse(chunks, media_type="application/octet-stream")


async def delete(request: Request) -> Response:
    return json_response(await state_of(request).files.delete(*_ids(request)))


_ONE = "/v1/files/{file_id}"
routes = [
    Route("/v1/files", create, methods=["POST"]),
    Route("/v1/files", list_files, methods=["GET"]),
    Route(_ONE, retrieve, methods=["GET"]),
    Route(_ONE, delete, methods=["DELETE"]),
    Route(_ONE + "/content", content, methods=["GET"]),
]
