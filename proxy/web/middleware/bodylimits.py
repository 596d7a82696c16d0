"""Request-body size limit: what the front middleware (front.py) checks and counts.

A declared `Content-Length` over the limit is refused before a byte is read; a chunked body is
counted as it arrives and refused the moment it passes the limit (the handler's `body()` raises,
and the one error path renders the 413).

A file upload (`POST /v1/files`) has its own limit: the largest file (`--max-file-bytes`)
plus `MULTIPART_SLACK` for the multipart framing and the other fields, bounded the same way as
it streams in; the route then holds the file itself to exactly `--max-file-bytes`.

A body that pauses longer than `--body-timeout` between two reads is a 408: a client that opens
a body and stops sending would otherwise hold its task (and an upload its slot, and its spooled
file) for as long as it keeps the connection. Only reads of the body are timed: once it is
whole, a stream's wait for the client's disconnect is not.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope

from proxy.core.errors import PayloadTooLarge, RequestTimeout
from proxy.web.errors import error_response


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")


UPLOAD_PATH = "/v1/files"
# Boundaries, part headers, `purpose`, `expires_after` and a filename: a few hundred bytes from
# the SDKs; 64 KiB leaves room for any client's framing and still bounds the body.
MULTIPART_SLACK = 64 * 1024


def _too_slow(seconds: float) -> RequestTimeout:
    return RequestTimeout(f"The request body paused for more than {seconds:g} seconds.")


class BodyLimits:
    """The limits the front middleware (front.py) puts on every HTTP request's body."""

    def __init__(self, limit: int, upload_limit: int | None = None, *, idle: float) -> None:
        self.limit = limit
        self.upload_limit = limit if upload_limit is None else upload_limit + MULTIPART_SLACK
        self.idle = idle

    def of(self, scope: Scope) -> int:
        """The limit of this request's body."""
        return (self.upload_limit if scope["path"] == UPLOAD_PATH and scope["method"] == "POST"
                else self.limit)

    def refusal(self, limit: int, declared: list[bytes]) -> ASGIApp | None:
        """A 413 when a declared `Content-Length` is over `limit`: refused unread."""
        for value in declared:
            try:
                size = int(value)
            except ValueError:
                continue
            if size > limit:
                return error_response(_too_large(limit))
        return None

    def counted(self, limit: int, receive: Receive) -> Receive:
        """`receive`, with the body counted against `limit` and each read timed."""
        received = 0
        whole = False
        idle = self.idle

        async def counted() -> Message:
            nonlocal received, whole
            if whole:  # the body is in: what is left to receive is the client's leaving
                return await receive()
            try:
                async with asyncio.timeout(idle):
                    message = await receive()
            except TimeoutError:
                raise _too_slow(idle) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)
                whole = not message.get("more_body", False)
            return message

        return counted
