"""A real MCP server for the tests (the `mcp` package's own server over streamable HTTP).

    python -m tests.support.mcp_server --port N [--token SECRET]

Tools: `add(a, b)`, `echo(text)`, `fail(reason)` (always an error result), `slow(seconds)`
(sleeps, for cancelling mid-call; bounded to 60 s), `peek()` (read-only) and `run_code(code)`
(the code interpreter's stand-in: each line `print(<arithmetic>)` prints its value, anything
else is an error; deterministic, nothing is executed). With `--token`,
every request needs `Authorization: Bearer SECRET` (401 otherwise): the authenticated variant.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import operator

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

    @server.tool(description="Run Python code; returns what it printed.")
    def run_code(code: str) -> str:
        return "".join(f"{_printed(line)}\n" for line in code.splitlines() if line.strip())

    return server


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _printed(line: str) -> int:
    """`print(<integer arithmetic>)`'s value; anything else raises (the tool's error)."""
    node = ast.parse(line.strip(), mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print" and len(node.args) == 1):
        raise ValueError(f"only print(<arithmetic>) runs here: {line.strip()!r}")
    return _value(node.args[0])


def _value(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return int(_OPS[type(node.op)](_value(node.left), _value(node.right)))
    raise ValueError("only integer +, -, *, // and % are understood")


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
