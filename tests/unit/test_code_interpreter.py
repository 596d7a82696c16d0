"""code_interpreter as a hosted kind served by an MCP server (core/hosted.py CODE_INTERPRETER,
services/tools/mcphosted.py): the request tool's checks, the item and its streamed code, the
include, the server held to `--mcp-allow`, and the runner over a fake MCP client."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import ProxyError
from proxy.core.events.replay import events_from_response
from proxy.core.hosted import (
    CODE_INTERPRETER,
    FILE_SEARCH,
    WEB_SEARCH,
    HostedCall,
    includes,
    streamed_events,
)
from proxy.core.mcp import McpServer
from proxy.core.request.tools import parse_tools
from proxy.services.tools.mcpclient import CallResult, McpFailure
from proxy.services.tools.mcphosted import McpHostedTool
from proxy.settings.checks import ConfigError

SERVES = frozenset({"code_interpreter"})


def parsed(tool: dict[str, Any]) -> Any:
    return parse_tools([tool], drop_hosted=True, max_tools=8, run_hosted=SERVES)


def test_the_tool_is_echoed_with_its_container_and_run() -> None:
    tools = parsed({"type": "code_interpreter", "container": {"type": "auto",
                                                              "file_ids": ["file_1"]}})
    assert tools.hosted == ("code_interpreter",)
    assert tools.tools == [{"type": "code_interpreter",
                            "container": {"type": "auto", "file_ids": ["file_1"]}}]
    assert parsed({"type": "code_interpreter", "container": "cntr_1"}).tools[0]["container"] \
        == "cntr_1"


@pytest.mark.parametrize(("tool", "param"), [
    ({"type": "code_interpreter"}, "tools[0].container"),
    ({"type": "code_interpreter", "container": 3}, "tools[0].container"),
    ({"type": "code_interpreter", "container": {"type": "big"}}, "tools[0].container.type"),
])
def test_a_bad_container_is_a_400_naming_it(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(ProxyError) as info:
        parsed(tool)
    assert info.value.status == 400 and info.value.param == param


def test_without_a_server_it_stays_dropped() -> None:
    tools = parse_tools([{"type": "code_interpreter", "container": {"type": "auto"}}],
                        drop_hosted=True, max_tools=8)
    assert (tools.hosted, tools.dropped) == ((), ("code_interpreter",))


def test_the_code_streams_once_whole_and_replays_the_same() -> None:
    item = CODE_INTERPRETER.item("ci_1", "completed", '{"code": "print(1)"}')
    assert item == {"id": "ci_1", "type": "code_interpreter_call", "status": "completed",
                    "code": "print(1)", "container_id": "cntr_mcp", "outputs": None}
    assert streamed_events(CODE_INTERPRETER, item) == [
        ("response.code_interpreter_call_code.delta", {"delta": "print(1)"}),
        ("response.code_interpreter_call_code.done", {"code": "print(1)"})]
    assert streamed_events(WEB_SEARCH, item) == []
    kinds = [e["type"] for e in events_from_response(
        {"id": "resp_1", "object": "response", "status": "completed", "output": [item]})]
    start = kinds.index("response.output_item.added") + 1
    assert kinds[start:kinds.index("response.output_item.done") + 1] == [
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
        "response.output_item.done"]


def test_each_kind_says_whether_its_include_was_asked() -> None:
    asked = includes(("web_search", "file_search", "code_interpreter"),
                     ["code_interpreter_call.outputs"])
    assert asked == {"file_search": {"include_results": False},
                     "code_interpreter": {"include_results": True}}
    assert FILE_SEARCH.include == "file_search_call.results"


class FakeMcp:
    """The MCP client's two outcomes of a call, as values (mcpclient.py's contract)."""

    def __init__(self, outcome: CallResult | McpFailure) -> None:
        self.outcome = outcome
        self.calls: list[tuple[McpServer, str, str]] = []

    async def call_tool(self, server: McpServer, name: str, arguments: str) -> CallResult:
        self.calls.append((server, name, arguments))
        if isinstance(self.outcome, McpFailure):
            raise self.outcome
        return self.outcome


def runner(outcome: CallResult | McpFailure) -> tuple[McpHostedTool, FakeMcp]:
    fake = FakeMcp(outcome)
    tool = McpHostedTool.configured(CODE_INTERPRETER, "http://127.0.0.1:9000/mcp", "python",
                                    allow=("http://127.0.0.1",), client=fake,  # type: ignore[arg-type]
                                    flag="--code-interpreter-mcp")
    return tool, fake


async def test_a_call_runs_the_named_tool_with_the_models_arguments() -> None:
    tool, fake = runner(CallResult("42\n"))
    shown = await tool.run('{"code": "print(6*7)"}', 1,
                           HostedCall("t", {"include_results": True}))
    (server, name, arguments), = fake.calls
    assert (server.url, server.private_ok, name, arguments) == (
        "http://127.0.0.1:9000/mcp", True, "python", '{"code": "print(6*7)"}')
    assert (shown.fields, shown.output, shown.failed) == (
        {"outputs": [{"type": "logs", "logs": "42\n"}]}, "42\n", False)
    hidden = await tool.run('{"code": "print(6*7)"}', 1, HostedCall("t", {}))
    assert hidden.fields == {"outputs": None} and hidden.output == "42\n"


@pytest.mark.parametrize("outcome", [
    CallResult(None, {"type": "mcp_tool_execution_error",
                      "content": [{"type": "text", "text": "NameError: x"}]}),
    McpFailure({"type": "http_error", "code": 504, "message": "NameError: x (timed out)"}),
])
async def test_a_tool_error_or_a_server_failure_is_a_failed_call(
        outcome: CallResult | McpFailure) -> None:
    tool, _ = runner(outcome)
    result = await tool.run('{"code": "x"}', 1, HostedCall("t", {"include_results": True}))
    assert result.failed and result.output.startswith("The code failed: NameError: x")
    assert "NameError: x" in result.fields["outputs"][0]["logs"]


@pytest.mark.parametrize(("url", "allow"), [
    ("http://127.0.0.1:9000/mcp", ()),  # MCP not enabled at all
    ("http://tools.corp.evil.com/mcp", ("http://tools.corp",)),
    ("http://10.0.0.5/mcp", ("https://",)),  # a private address the prefix does not name
])
def test_a_server_the_allow_list_refuses_stops_the_start(url: str,
                                                        allow: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        McpHostedTool.configured(CODE_INTERPRETER, url, "run_code", allow=allow,
                                 client=FakeMcp(CallResult("")),  # type: ignore[arg-type]
                                 flag="--code-interpreter-mcp")
    assert "--code-interpreter-mcp" in str(info.value)
