"""The MCP client adapter: the `mcp` package's streamable-HTTP client, I/O at the edge.

The only module that imports `mcp`. Two operations, each one short session (initialize, then
the request, then close): `list_tools` and `call_tool`. Every way they can go wrong becomes a
value, never an exception for the caller:

    unreachable, refused address, HTTP 4xx/5xx         → McpFailure(http_error)
    too slow (whichever clock noticed)                  → McpFailure(http_error 504)
    JSON-RPC error from the server                      → McpFailure(mcp_protocol_error)
    a tool that ran and reported an error (isError)     → CallResult(error=tool execution)

Bounds: the whole operation (connect, initialize, request) runs under `anyio.fail_after` in
the caller's own task. Not `asyncio.wait_for`: the client runs its transport in an anyio task
group, and cancelling that from another task can hang on a closed port; an anyio deadline in
the same task unwinds the cancel scopes in order. The tool's output is cut to
`max_output_bytes`. Redirects are not followed to another origin (the SDK's rule). The server's
name is resolved once and the connection goes to the address vetted then (upstream/egress.py): an
address outside the allow-list's intent (private, loopback) is refused before connecting, and a
second DNS answer never gets a say. Headers are sent to the MCP server only, and never logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from proxy.core import mcp as core
from proxy.core.mcp import McpServer
from proxy.core.policy.urlpolicy import UrlRefused, parse_target

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from proxy.telemetry.tracing import Tracing
    from proxy.upstream.egress import Pinned, Resolve

T = TypeVar("T")
# A tool's output beyond this many bytes is cut (it goes to the model and into the store).
MAX_OUTPUT_BYTES = 1024 * 1024


class McpFailure(Exception):
    """The server could not be used: `error` is the `mcp_call.error` object."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", "MCP failure"))
        self.error = error

    @property
    def message(self) -> str:
        return str(self.error.get("message"))


@dataclass(frozen=True, slots=True)
class CallResult:
    output: str | None
    error: dict[str, Any] | None = None


class McpClient:
    def __init__(self, *, connect_timeout: float, call_timeout: float,
                 max_output_bytes: int = MAX_OUTPUT_BYTES,
                 resolve: Resolve | None = None, tracing: Tracing | None = None) -> None:
        self._connect = connect_timeout
        self._tracing = tracing  # None: no spans (proxy/telemetry/tracing.py)
        self._resolve = resolve  # None: the system's resolver (egress.system_resolve)
        self._timeout = call_timeout
        self._max_output = max_output_bytes
        # The SDK's HTTP client logs every request at INFO; one MCP call is several requests.
        logging.getLogger("httpx2").setLevel(logging.WARNING)

    async def list_tools(self, server: McpServer) -> list[dict[str, Any]]:
        """The server's tools as `mcp_list_tools` shows them. Raises McpFailure."""
        async def run(session: ClientSession) -> list[dict[str, Any]]:
            from mcp.types import PaginatedRequestParams

            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            for _ in range(32):  # pages, bounded
                result = await (session.list_tools() if cursor is None else session.list_tools(
                    params=PaginatedRequestParams(cursor=cursor)))
                for tool in result.tools:
                    annotations = (tool.annotations.model_dump(exclude_none=True, by_alias=True)
                                   if tool.annotations is not None else None)
                    tools.append(core.listed_tool(tool.name, tool.description,
                                                  tool.input_schema, annotations))
                cursor = result.next_cursor
                if not cursor:
                    break
            return tools
        return await self._session(server, run)

    async def call_tool(self, server: McpServer, name: str, arguments: str) -> CallResult:
        """Run one tool. A tool's own error is a result; a server that failed raises. Traced:
        in a span naming the tool and the server's label (never its URL or the arguments)."""
        if self._tracing is None:
            return await self._call_tool(server, name, arguments)
        with self._tracing.tool_span(name, "mcp", **{"proxy.mcp.server": server.label}) as span:
            result = await self._call_tool(server, name, arguments)
            if result.error is not None:
                span.set_attribute("error.type", str(result.error.get("type")))
            return result

    async def _call_tool(self, server: McpServer, name: str, arguments: str) -> CallResult:
        try:
            parsed = _arguments(arguments)
        except ValueError as exc:
            return CallResult(None, {"type": "mcp_protocol_error", "code": -32602,
                                     "message": f"invalid arguments: {exc}"})

        async def run(session: ClientSession) -> CallResult:
            result = await session.call_tool(name, parsed)
            text = core.bound_text(_text_of(result.content), self._max_output)
            if result.is_error:
                return CallResult(None, {"type": "mcp_tool_execution_error",
                                         "content": [{"type": "text", "text": text}]})
            return CallResult(text)
        return await self._session(server, run)

    async def _session(self, server: McpServer,
                       run: Callable[[ClientSession], Awaitable[T]]) -> T:
        # The SDK is imported on first use: it doubles the process's start-up time, and most
        # deployments never call an MCP server.
        import httpx2
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        from proxy.upstream.egress import pinned_client

        pinned = await self._pin(server)
        timeout = httpx2.Timeout(self._timeout, connect=self._connect)
        try:
            with anyio.fail_after(self._timeout + self._connect):
                async with (
                    pinned_client(pinned, headers=server.headers, timeout=timeout) as http,
                    streamable_http_client(pinned.target.url, http_client=http,
                                           terminate_on_close=False) as (read, write),
                    ClientSession(read, write, read_timeout_seconds=self._timeout) as session,
                ):
                    await session.initialize()
                    result = await run(session)
        except TimeoutError:
            _still_cancelled()
            raise McpFailure(_timed_out(self._timeout + self._connect)) from None
        except McpFailure:
            raise
        except Exception as exc:  # transport errors arrive as several kinds, often grouped
            _still_cancelled()
            raise McpFailure(_transport_error(exc, self._timeout)) from None
        _still_cancelled()  # a cancellation the SDK swallowed on its way out
        return result

    async def _pin(self, server: McpServer) -> Pinned:
        """The server's address, resolved once and vetted: the one the connection goes to."""
        from proxy.upstream.egress import EgressRefused, pin, system_resolve

        try:
            return await pin(parse_target(server.url), server.private_ok, timeout=self._connect,
                             allow="--mcp-allow", resolve=self._resolve or system_resolve)
        except UrlRefused as exc:  # a spec queued before the URL rules were what they are
            raise McpFailure({"type": "http_error", "code": 403,
                              "message": f"the MCP server's URL is refused: {exc}"}) from None
        except EgressRefused as exc:
            raise McpFailure({"type": "http_error", "code": exc.status,
                              "message": f"the MCP server's {exc.message}"}) from None


def _arguments(text: str) -> dict[str, Any]:
    import json
    value = json.loads(text or "{}")
    if not isinstance(value, dict):
        raise ValueError("a JSON object is needed")
    return value


def _text_of(content: list[Any]) -> str:
    parts: list[str] = []
    for block in content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


def _still_cancelled() -> None:
    """Our task is being cancelled (a client gone, a background cancel) and the SDK's cleanup
    raised an error of its own on the way out: the cancellation wins, it is not a failed call
    (else the loop would go on, the cancellation swallowed)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _timed_out(seconds: float) -> dict[str, Any]:
    return {"type": "http_error", "code": 504,
            "message": f"the MCP server did not answer within {seconds:g}s"}


def _transport_error(exc: BaseException, timeout: float) -> dict[str, Any]:
    """The most telling error inside `exc` (task groups wrap them) as an `mcp_call.error`."""
    import httpx2
    from mcp.shared.exceptions import MCPError
    from mcp.types import REQUEST_TIMEOUT

    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    # Three clocks can end a slow operation (ours, the session's read timeout, the HTTP
    # client's): each says so in its own way, and all of them mean the same thing.
    if isinstance(leaf, TimeoutError | httpx2.TimeoutException) or (
            isinstance(leaf, MCPError) and leaf.code == REQUEST_TIMEOUT):
        return _timed_out(timeout)
    if isinstance(leaf, MCPError):  # e.g. the transport's view of an HTTP error status
        return {"type": "mcp_protocol_error", "code": leaf.code,
                "message": f"the MCP server refused: {leaf.message}"}
    status = getattr(getattr(leaf, "response", None), "status_code", None)
    if isinstance(status, int):
        return {"type": "http_error", "code": status,
                "message": f"the MCP server answered HTTP {status}"}
    return {"type": "http_error", "code": 502,
            "message": f"the MCP server is unreachable ({leaf.__class__.__name__})"}
