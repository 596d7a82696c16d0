"""Request-body size limit, as pure ASGI middleware.

A declared `Content-Length` over the limit is refused before a byte is read; a chunked body is
counted as it arrives and refused the moment it passes the limit (the handler's `body()` raises,
and the one error path renders the 413).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.errors import PayloadTooLarge
from proxy.web.errors import error_response


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    await error_response(_too_large(self.limit))(scope, receive, send)
                    return
        received = 0
        limit = self.limit

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)
            return message

        await self.app(scope, counted, send)
