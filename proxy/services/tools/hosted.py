"""Hosted tools' runners: what the tool loop (toolloop.py) calls when the model calls a hosted
tool (core/hosted.py). One runner per kind, built once per process (proxy/runtime.py) from that
process's own settings: a background job's worker runs a search with its own `--web-search`,
never with a URL a request or a spec carried.

A runner never raises: whatever goes wrong is a `failed` HostedResult, which the model is told
of and answers without. A new hosted tool is a kind in core/hosted.py `KINDS` plus a runner in
this room (mcphosted.py's for a kind an operator's MCP server serves), built in runtime.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core.hosted import HostedCall, HostedKind, HostedResult
from proxy.core.request.fields import at
from proxy.telemetry.tracing import Tracing

NO_CALL = HostedCall()


class HostedRunner(Protocol):
    kind: HostedKind

    async def run(self, arguments: str, first: int, call: HostedCall = NO_CALL) -> HostedResult:
        """Run one call (`arguments`: the model's JSON text); what it finds is numbered from
        `first` (the response's earlier calls took the numbers before); `call`: whose response
        it is and the request's options for the kind."""
        ...


@dataclass(frozen=True)
class HostedTools:
    runners: Mapping[str, HostedRunner] = field(default_factory=dict)  # kind name → runner

    @classmethod
    def of(cls, *runners: HostedRunner | None) -> HostedTools:
        return cls({r.kind.name: r for r in runners if r is not None})

    def tool_types(self) -> frozenset[str]:
        """The request tool types this process runs (the others stay dropped or refused)."""
        return frozenset(t for r in self.runners.values() for t in r.kind.tool_types)

    def get(self, kind: str) -> HostedRunner | None:
        return self.runners.get(kind)

    async def vet(self, tenant: str, tools: Any) -> dict[str, dict[str, Any]]:
        """Before the model runs: each hosted tool of the request (`tools`, already parsed
        and valid) whose runner can check its options against what the key holds (a
        file_search's vector stores) is checked; what it refuses is the request's 404 or 400,
        naming `tools[i]...`, with no upstream call made and nothing stored. Returns what the
        runners add to their kind's options for the run (by kind name): what the request's
        process knows and a worker may not (the key's token limits)."""
        extras: dict[str, dict[str, Any]] = {}
        for i, tool in enumerate(tools if isinstance(tools, list) else ()):
            kind = tool.get("type") if isinstance(tool, dict) else None
            runner = next((r for r in self.runners.values() if kind in r.kind.tool_types),
                          None)
            vet = _vet_of(runner)
            if runner is None or vet is None or runner.kind.parse is None:
                continue
            path = at("tools", i)
            extras.setdefault(runner.kind.name, {}).update(
                await vet(tenant, runner.kind.parse(tool, path), path))
        return extras

    def traced(self, tracing: Tracing | None) -> HostedTools:
        """The same runners, each call in a span of its own when tracing is on."""
        if tracing is None:
            return self
        return HostedTools({name: TracedRunner(r.kind, r, tracing)
                            for name, r in self.runners.items()})


Vet = Callable[[str, dict[str, Any], str], Awaitable[dict[str, Any]]]


def _vet_of(runner: HostedRunner | None) -> Vet | None:
    """A runner's optional `vet(tenant, options, path)`: raises a ProxyError naming `path`
    when the request's options for its kind cannot be served for this key; else returns what
    it adds to those options for the run."""
    vet: Vet | None = getattr(runner, "vet", None)
    return vet


@dataclass  # not frozen: HostedRunner's `kind` is a plain attribute
class TracedRunner:
    """A runner whose every call is a tool span (telemetry/tracing.py); a failed result marks it."""

    kind: HostedKind
    runner: HostedRunner
    tracing: Tracing

    async def vet(self, tenant: str, options: dict[str, Any], path: str) -> dict[str, Any]:
        vet = _vet_of(self.runner)
        return await vet(tenant, options, path) if vet is not None else {}

    async def run(self, arguments: str, first: int, call: HostedCall = NO_CALL) -> HostedResult:
        with self.tracing.tool_span(self.kind.name, "hosted") as span:
            result = await self.runner.run(arguments, first, call)
            if result.failed:
                span.set_attribute("error.type", "tool_failed")
            return result
