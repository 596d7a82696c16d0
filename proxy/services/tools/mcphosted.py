"""A hosted kind an operator's MCP server serves (core/hosted.py `HostedKind.answer`): the model's
call runs as one call of that server's named tool, its arguments passed as they are, and the
kind's `answer` turns the tool's text into the kind's item (code_interpreter's `outputs`).

The server comes from configuration only (its flag, e.g. `--code-interpreter-mcp`), never from a
request, and it is held to the rules of a request's MCP server: its URL must be admitted by
`--mcp-allow` (checked when the process starts: a refused URL stops it with the flag named),
and the client (mcpclient.py) vets the address it connects to, bounds the call in time and cuts
its output. `run` never raises: a server that failed or a tool's error is a `failed` result the
model is told of.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from proxy.core.hosted import HostedCall, HostedKind, HostedResult
from proxy.core.mcp import McpServer, error_text
from proxy.core.policy.urlpolicy import UrlRefused, check, parse_prefix
from proxy.services.tools.hosted import NO_CALL
from proxy.services.tools.mcpclient import McpClient, McpFailure
from proxy.settings.checks import ConfigError

log = logging.getLogger("proxy.mcp")


@dataclass  # not frozen: HostedRunner's `kind` is a plain attribute
class McpHostedTool:
    kind: HostedKind
    server: McpServer
    tool: str  # the tool's name on the server
    client: McpClient

    @classmethod
    def configured(cls, kind: HostedKind, url: str, tool: str, *, allow: tuple[str, ...],
                   client: McpClient, flag: str) -> McpHostedTool:
        """The runner of `kind` on the server at `url` (the value of `flag`), admitted by the
        `--mcp-allow` prefixes `allow` as a request's MCP server must be. Raises ConfigError."""
        assert kind.answer is not None, f"{kind.name} has no `answer`: no MCP server serves it"
        if not allow:
            raise ConfigError(flag, "an MCP server needs --mcp-allow PREFIX admitting its URL")
        try:
            target, prefix = check(url, tuple(parse_prefix(p) for p in allow), "--mcp-allow")
        except UrlRefused as exc:
            raise ConfigError(flag, f"{url!r} is refused: {exc}") from None
        server = McpServer(kind.name, target.url, {}, (tool,), False, "never",
                           private_ok=prefix.private_ok)
        return cls(kind, server, tool, client)

    async def run(self, arguments: str, first: int, call: HostedCall = NO_CALL) -> HostedResult:
        assert self.kind.answer is not None
        started = time.monotonic()
        try:
            result = await self.client.call_tool(self.server, self.tool, arguments)
        except McpFailure as exc:
            _logged(self.kind, str(exc.error.get("type")), started)
            return self.kind.answer(error_text(exc.error), True, call.options)
        _logged(self.kind, "ok" if result.error is None else "tool_error", started)
        if result.error is not None:  # the tool ran and failed: its own words
            said = [str(c.get("text", "")) for c in result.error.get("content") or ()]
            return self.kind.answer("\n".join(said) or error_text(result.error), True,
                                    call.options)
        return self.kind.answer(result.output or "", False, call.options)


def _logged(kind: HostedKind, outcome: str, started: float) -> None:
    """One line per call: its outcome and time, never the arguments or the output."""
    log.info("%s on MCP: %s in %.0f ms", kind.name, outcome, (time.monotonic() - started) * 1000)
