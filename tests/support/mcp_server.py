"""A real MCP server for the tests (the `mcp` package's own server over streamable HTTP).

    python -m tests.support.mcp_server --port N [--token SECRET]

Tools: `add(a, b)`, `echo(text)`, `fail(reason)` (always an error result), `slow(seconds)`
(sleeps, for cancelling mid-call; bounded to 60 s) and `peek()` (read-only). With `--token`,
every request needs `Authorization: Bearer SECRET` (401 otherwise): the authenticated variant.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from starlette.types import ASGIApp, Receive, Scope, Send


def build() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Always fails.")
    def fail(reason: str = "broken") -> str:
        raise ValueError(f"tool failed: {reason}")

    @server.tool(description="Sleep, then answer.")
    async def slow(seconds: float = 30.0) -> str:
        await asyncio.sleep(min(max(seconds, 0.0), 60.0))
        return "slept"

    @server.tool(description="A read-only look.", annotations=ToolAnnotations(readOnlyHint=True))
    def peek() -> str:
        return "nothing to see"

    return server


class BearerOnly:
    """401 unless the request carries the expected bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != \
                self.expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token")
    args = parser.parse_args()
    app: ASGIApp = build().streamable_http_app(stateless_http=True, json_response=True)
    if args.token:
        app = BearerOnly(app, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
