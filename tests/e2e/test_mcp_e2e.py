"""MCP tools run by the proxy, end to end: a real MCP server (the `mcp` package's
own, tests/support/mcp_server.py) on loopback, the simulator steered with `call=NAME`, real
proxy processes, the official SDK as the client, every event validated (check_stream)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.support import servers
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, free_port, start_mcp_server, start_proxy
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-test"
AUTH = {"authorization": f"Bearer {KEY}"}
TOKEN = "s3cret-token"
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(scope="module")
def tools_server() -> Iterator[ServerProcess]:
    server = start_mcp_server()
    yield server
    # Its graceful shutdown waits on sessions the tests left open (a call that never answers)
    # for the whole default 10 s; it is a peer here, not under test: killed, not waited for.
    server.kill()


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ServerProcess]:
    server = start_mcp_server("--token", TOKEN)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mcp_proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """MCP enabled for loopback (any port), calls bounded to a few seconds."""
    server = start_proxy(simulator.url, "--mcp-allow", "http://127.0.0.1", "--mcp-timeout", "3")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess,
         redis_server: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two instances on one Redis: A runs the worker, B only serves HTTP."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    a = start_proxy(simulator.url, "--mcp-allow", "http://127.0.0.1", "--heartbeat-interval",
                    "0.5", redis_url=url)
    b = start_proxy(simulator.url, "--mcp-allow", "http://127.0.0.1", "--no-worker",
                    redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def mcp_tool(server: ServerProcess, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "server_url": f"{server.url}/mcp",
            "require_approval": "never", **extra}


def add_call(a: int = 2, b: int = 3) -> str:
    return f'please add [[sim call=add call_args={{"a":{a},"b":{b}}}]]'


def post_json(server: ServerProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + "/v1/responses", json=body, headers=AUTH, timeout=60)


def post_sse(server: ServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", server.url + "/v1/responses", json={**body, "stream": True},
                      headers=AUTH, timeout=60) as response:
        assert response.status_code == 200, response.read()
        return data_payloads(b"".join(response.iter_raw()))


def sse_get(server: ServerProcess, path: str) -> list[dict[str, Any]]:
    with httpx.stream("GET", server.url + path, headers=AUTH, timeout=40) as response:
        assert response.status_code == 200
        return data_payloads(b"".join(response.iter_raw()))


def wait_status(server: ServerProcess, response_id: str, statuses: set[str],
                timeout: float = 30.0) -> dict[str, Any]:
    return servers.wait_status(server, response_id, statuses, timeout, headers=AUTH)


def types(output: list[Any]) -> list[str]:
    return [item["type"] if isinstance(item, dict) else item.type for item in output]


# -- list + call + answer ----------------------------------------------------------------------
def test_list_call_and_answer_not_streamed(mcp_proxy: ServerProcess,
                                           tools_server: ServerProcess) -> None:
    response = sdk(mcp_proxy).responses.create(model="sim-model", input=add_call(),
                                               tools=[mcp_tool(tools_server)])
    assert response.status == "completed"
    assert types(response.output) == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, _ = response.output
    assert listed.type == "mcp_list_tools" and listed.server_label == "calc"
    assert {t.name for t in listed.tools} >= {"add", "echo", "fail", "slow"}
    assert call.type == "mcp_call"
    assert (call.name, call.server_label, call.output, call.error) == ("add", "calc", "5", None)
    assert call.arguments == '{"a": 2, "b": 3}'
    # The result went back to the model, which answered it (the simulator's tool summary).
    assert response.output_text == "Tool results: add=5"
    assert response.usage is not None and response.usage.input_tokens > 0
    raw = post_json(mcp_proxy, {"model": "sim-model", "input": add_call(4, 5),
                                "tools": [mcp_tool(tools_server)]})
    assert raw.status_code == 200
    Response.model_validate(raw.json(), strict=True)
    assert raw.json()["output"][1]["output"] == "9"


def test_list_call_and_answer_streamed_every_event_valid(mcp_proxy: ServerProcess,
                                                         tools_server: ServerProcess) -> None:
    events = [e.to_dict() for e in sdk(mcp_proxy).responses.create(
        model="sim-model", input=add_call(), tools=[mcp_tool(tools_server)], stream=True)]
    check_stream(events)
    kinds = [e["type"] for e in events]
    for expected in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                     "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
                     "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert expected in kinds, expected
    assert kinds.index("response.mcp_list_tools.completed") < \
        kinds.index("response.mcp_call.in_progress") < kinds.index("response.mcp_call.completed")
    final = events[-1]["response"]
    assert types(final["output"]) == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][1]["output"] == "5"
    # the MCP tool is echoed without anything secret, and offered to nobody else
    assert final["tools"][0]["type"] == "mcp" and "headers" not in final["tools"][0]


def test_allowed_tools_narrow_the_list_and_the_offer(mcp_proxy: ServerProcess,
                                                     tools_server: ServerProcess) -> None:
    response = sdk(mcp_proxy).responses.create(
        model="sim-model", input=add_call(), tools=[mcp_tool(tools_server,
                                                             allowed_tools=["echo"])])
    assert types(response.output) == ["mcp_list_tools", "message"]
    assert [t.name for t in response.output[0].tools] == ["echo"]  # type: ignore[union-attr]
    # `add` was never offered, so the model could not call it: it answered in text
    assert response.output_text.startswith("You said:")
    echoed = sdk(mcp_proxy).responses.create(
        model="sim-model", input='[[sim call=echo call_args={"text":"hi"}]]',
        tools=[mcp_tool(tools_server, allowed_tools={"tool_names": ["echo"]})])
    assert echoed.output[1].output == "hi"  # type: ignore[union-attr]
    # tool_choice "none": listed, never offered; allowed_tools may name an MCP server
    quiet = sdk(mcp_proxy).responses.create(model="sim-model", input=add_call(),
                                            tools=[mcp_tool(tools_server)], tool_choice="none")
    assert types(quiet.output) == ["mcp_list_tools", "message"]
    chosen = sdk(mcp_proxy).responses.create(
        model="sim-model", input=add_call(), tools=[mcp_tool(tools_server)],
        tool_choice={"type": "allowed_tools", "mode": "auto",
                     "tools": [{"type": "mcp", "server_label": "calc"}]})
    assert chosen.output[1].output == "5"  # type: ignore[union-attr]


def test_a_failing_tool_is_reported_and_fed_back(mcp_proxy: ServerProcess,
                                                 tools_server: ServerProcess) -> None:
    events = post_sse(mcp_proxy, {"model": "sim-model", "tools": [mcp_tool(tools_server)],
                                  "input": '[[sim call=fail call_args={"reason":"nope"}]]'})
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert "response.mcp_call.failed" in kinds and "response.mcp_call.completed" not in kinds
    final = events[-1]["response"]
    assert final["status"] == "completed"
    call = final["output"][1]
    assert call["status"] == "failed" and call["output"] is None
    assert call["error"]["type"] == "mcp_tool_execution_error"
    assert final["output"][2]["content"][0]["text"].startswith("Tool results: fail=Error:")


def test_an_authenticated_server_gets_the_tools_headers(mcp_proxy: ServerProcess,
                                                        auth_server: ServerProcess) -> None:
    with_headers = mcp_tool(auth_server, headers={"Authorization": f"Bearer {TOKEN}"})
    response = sdk(mcp_proxy).responses.create(model="sim-model", input=add_call(),
                                               tools=[with_headers])
    assert response.output[1].output == "5"  # type: ignore[union-attr]
    dumped = response.model_dump_json()
    assert TOKEN not in dumped  # never echoed, never stored
    authorization = sdk(mcp_proxy).responses.create(
        model="sim-model", input=add_call(), tools=[mcp_tool(auth_server,
                                                              authorization=TOKEN)])
    assert authorization.output[1].output == "5"  # type: ignore[union-attr]
    assert TOKEN not in sdk(mcp_proxy).responses.retrieve(response.id).model_dump_json()
    # without the header the server says 401: the listing fails, and so does the response
    refused = post_json(mcp_proxy, {"model": "sim-model", "input": add_call(),
                                    "tools": [mcp_tool(auth_server)]})
    assert refused.status_code == 424
    assert "refused" in refused.json()["error"]["message"]
    events = post_sse(mcp_proxy, {"model": "sim-model", "input": add_call(),
                                  "tools": [mcp_tool(auth_server)]})
    check_stream(events)
    assert "response.mcp_list_tools.failed" in [e["type"] for e in events]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["output"][0]["error"]


# -- approvals ---------------------------------------------------------------------------------
def test_approval_then_approve_runs_the_call(mcp_proxy: ServerProcess,
                                             tools_server: ServerProcess) -> None:
    client = sdk(mcp_proxy)
    tool = mcp_tool(tools_server, require_approval="always")
    first = client.responses.create(model="sim-model", input=add_call(), tools=[tool])
    assert first.status == "completed"
    assert types(first.output) == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert (request.name, request.arguments) == ("add", '{"a": 2, "b": 3}')  # type: ignore[union-attr]
    events = [e.to_dict() for e in client.responses.create(
        model="sim-model", previous_response_id=first.id, tools=[tool], stream=True,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id,
                "approve": True}])]
    check_stream(events)
    final = events[-1]["response"]
    # listed earlier in the chain: not listed again; the approved call runs, then the answer
    assert types(final["output"]) == ["mcp_call", "message"]
    call = final["output"][0]
    assert call["approval_request_id"] == request.id and call["output"] == "5"
    assert final["output"][1]["content"][0]["text"] == "Tool results: add=5"
    # every MCP item is stored: the input items show the approval, the object the call
    items = client.responses.input_items.list(final["id"])
    assert [i.type for i in items.data] == ["mcp_approval_response"]
    stored = client.responses.retrieve(final["id"])
    assert types(stored.output) == ["mcp_call", "message"]
    first_items = client.responses.retrieve(first.id)
    assert types(first_items.output) == ["mcp_list_tools", "mcp_approval_request"]


def test_approval_then_deny_skips_the_call(mcp_proxy: ServerProcess,
                                           tools_server: ServerProcess) -> None:
    client = sdk(mcp_proxy)
    tool = mcp_tool(tools_server, require_approval={"never": {"tool_names": ["echo"]}})
    first = client.responses.create(model="sim-model", input=add_call(), tools=[tool])
    assert types(first.output) == ["mcp_list_tools", "mcp_approval_request"]
    denied = client.responses.create(
        model="sim-model", previous_response_id=first.id, tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": first.output[1].id,
                "approve": False}])
    assert types(denied.output) == ["message"]  # nothing ran
    assert "denied" in denied.output_text
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="sim-model", previous_response_id=first.id, tools=[tool],
            input=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_nope",
                    "approve": True}])
    assert info.value.param == "input[0].approval_request_id"


# -- refusals and bounds -------------------------------------------------------------------------
def test_refused_without_the_allow_list(proxy: ServerProcess,
                                        tools_server: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(proxy).responses.create(model="sim-model", input="x", tools=[mcp_tool(tools_server)])
    assert info.value.param == "tools[0].type"
    assert "--mcp-allow" in str(info.value)


def test_refused_outside_the_allow_list(mcp_proxy: ServerProcess) -> None:
    for url in ("http://127.0.0.1.evil.example/mcp", "http://localhost:9/mcp",
                "http://user@127.0.0.1:9/mcp", "file:///etc/passwd"):
        with pytest.raises(openai.BadRequestError) as info:
            sdk(mcp_proxy).responses.create(
                model="sim-model", input="x",
                tools=[{"type": "mcp", "server_label": "x", "server_url": url}])
        assert info.value.param == "tools[0].server_url", url


def test_an_unreachable_server_fails_cleanly_within_a_bound(mcp_proxy: ServerProcess) -> None:
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    tool = {"type": "mcp", "server_label": "gone", "server_url": closed}
    refused = post_json(mcp_proxy, {"model": "sim-model", "input": "x", "tools": [tool]})
    assert refused.status_code == 424
    assert refused.json()["error"]["code"] == "mcp_server_error"
    events = post_sse(mcp_proxy, {"model": "sim-model", "input": "x", "tools": [tool]})
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert "unreachable" in events[-1]["response"]["error"]["message"]


def test_a_server_that_never_answers_fails_within_the_bound(mcp_proxy: ServerProcess) -> None:
    # A port that accepts connections (the kernel's backlog) and never says a word.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        tool = {"type": "mcp", "server_label": "mute", "server_url": url}
        # --mcp-timeout 3: the proxy gives up long before this client's 60 s
        refused = post_json(mcp_proxy, {"model": "sim-model", "input": "x", "tools": [tool]})
    assert refused.status_code == 424
    assert "mute" in refused.json()["error"]["message"]


def test_a_call_slower_than_the_bound_fails_and_the_response_goes_on(
        mcp_proxy: ServerProcess, tools_server: ServerProcess) -> None:
    events = post_sse(mcp_proxy, {"model": "sim-model", "tools": [mcp_tool(tools_server)],
                                  "input": '[[sim call=slow call_args={"seconds":30}]]'})
    check_stream(events)
    final = events[-1]["response"]
    assert final["status"] == "completed"  # --mcp-timeout 3: the call failed, not the response
    call = final["output"][1]
    assert call["status"] == "failed" and call["error"]["code"] == 504


def test_a_server_killed_mid_call_fails_the_call_and_the_response_goes_on(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """SIGKILL of the MCP server while the proxy waits on `slow`: the broken connection fails
    the call (not the 60 s `--mcp-timeout` of instance A), the model answers with the error,
    and what is stored and replayed is what the client saw."""
    a, _ = pair
    doomed = start_mcp_server()
    events: list[dict[str, Any]] = []
    try:
        body = {"model": "sim-model", "stream": True, "tools": [mcp_tool(doomed)],
                "input": '[[sim call=slow call_args={"seconds":50}]]'}
        with httpx.stream("POST", a.url + "/v1/responses", json=body, headers=AUTH,
                          timeout=httpx.Timeout(10, read=45)) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "response.mcp_call.in_progress":
                    doomed.kill()  # whether the request is sent yet or not, the call is lost
    finally:
        doomed.stop()
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert "response.mcp_call.failed" in kinds and "response.mcp_call.completed" not in kinds
    final = events[-1]["response"]
    assert (events[-1]["type"], final["status"]) == ("response.completed", "completed")
    call = final["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "failed"
    assert call["output"] is None and call["error"] is not None
    assert final["output"][2]["type"] == "message"  # the model went on with the failure
    assert wait_status(a, final["id"], TERMINAL)["output"] == final["output"]
    assert sse_get(a, f"/v1/responses/{final['id']}?stream=true") == events


# -- background ------------------------------------------------------------------------------
def test_background_mcp_response_completes_and_replays(
        pair: tuple[ServerProcess, ServerProcess], tools_server: ServerProcess) -> None:
    a, b = pair
    queued = sdk(b).responses.create(model="sim-model", input=add_call(7, 8), background=True,
                                     tools=[mcp_tool(tools_server)])
    assert queued.status == "queued"
    final = wait_status(b, queued.id, TERMINAL)
    assert final["status"] == "completed"
    assert types(final["output"]) == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][1]["output"] == "15"
    for server in (a, b):  # the replay, from either instance
        events = sse_get(server, f"/v1/responses/{queued.id}?stream=true")
        check_stream(events)
        assert events[-1]["response"]["output"] == final["output"]
    # a follow-up in the chain from the other instance: not listed again
    follow = sdk(a).responses.create(model="sim-model", input=add_call(1, 1),
                                     previous_response_id=queued.id,
                                     tools=[mcp_tool(tools_server)])
    assert types(follow.output) == ["mcp_call", "message"]


def test_background_mcp_response_cancels_mid_call(
        pair: tuple[ServerProcess, ServerProcess], tools_server: ServerProcess) -> None:
    a, b = pair
    job = sdk(b).responses.create(model="sim-model", background=True,
                                  input='[[sim call=slow call_args={"seconds":60}]]',
                                  tools=[mcp_tool(tools_server)])
    seen: list[str] = []
    with httpx.stream("GET", f"{b.url}/v1/responses/{job.id}?stream=true", headers=AUTH,
                      timeout=40) as response:
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            seen = [e["type"] for e in data_payloads(buffer[:buffer.rfind(b"\n\n") + 2])]
            if "response.mcp_call_arguments.done" in seen:
                break
    assert "response.mcp_call_arguments.done" in seen  # the call is running now
    assert sdk(a).responses.cancel(job.id).status == "cancelled"
    # The worker interrupts the call (60 s long) and closes the log: the replay ends.
    events = sse_get(b, f"/v1/responses/{job.id}?stream=true")
    check_stream(events)
    assert events[-1]["type"] == "response.cancelled"
    call = events[-1]["response"]["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "incomplete"
    assert sdk(a).responses.retrieve(job.id).status == "cancelled"


def test_a_client_leaving_during_a_call_cancels_the_response(
        mcp_proxy: ServerProcess, tools_server: ServerProcess) -> None:
    body = {"model": "sim-model", "stream": True, "tools": [mcp_tool(tools_server)],
            "input": '[[sim call=slow call_args={"seconds":60}]]'}
    with httpx.stream("POST", mcp_proxy.url + "/v1/responses", json=body, headers=AUTH,
                      timeout=60) as response:
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            if b"response.mcp_call_arguments.done" in buffer:
                break
    response_id = data_payloads(buffer[:buffer.find(b"\n\n") + 2])[0]["response"]["id"]
    # the stream closed mid-call: the call is cancelled, the stored response ends cancelled
    final = wait_status(mcp_proxy, response_id, TERMINAL)
    assert final["status"] == "cancelled"
    assert final["output"][1]["type"] == "mcp_call"
    assert final["output"][1]["status"] == "incomplete"


def test_a_conversation_lists_each_server_once(mcp_proxy: ServerProcess,
                                               tools_server: ServerProcess) -> None:
    client = sdk(mcp_proxy)
    conversation = client.conversations.create()
    first = client.responses.create(model="sim-model", input=add_call(1, 2),
                                    conversation=conversation.id,
                                    tools=[mcp_tool(tools_server)])
    assert types(first.output) == ["mcp_list_tools", "mcp_call", "message"]
    second = client.responses.create(model="sim-model", input=add_call(3, 4),
                                     conversation=conversation.id,
                                     tools=[mcp_tool(tools_server)])
    assert types(second.output) == ["mcp_call", "message"]
    assert second.output[0].output == "7"  # type: ignore[union-attr]
    items = client.conversations.items.list(conversation.id, order="asc")
    assert [i.type for i in items.data] == ["message", "mcp_list_tools", "mcp_call", "message",
                                            "message", "mcp_call", "message"]


# -- the URL is checked in normal form, the name resolved once --------------------------------
def test_dot_segments_host_and_hop_by_hop_headers_are_refused(
        mcp_proxy: ServerProcess, tools_server: ServerProcess) -> None:
    for tool, param in (
            (mcp_tool(tools_server, server_url=f"{tools_server.url}/mcp/../admin"),
             "tools[0].server_url"),
            (mcp_tool(tools_server, server_url=f"{tools_server.url}/mcp/%2e%2e/admin"),
             "tools[0].server_url"),
            (mcp_tool(tools_server, headers={"Host": "internal.admin"}), "tools[0].headers"),
            (mcp_tool(tools_server, headers={"transfer-encoding": "chunked"}),
             "tools[0].headers")):
        refused = post_json(mcp_proxy, {"model": "sim-model", "input": "x", "tools": [tool]})
        assert refused.status_code == 400, tool
        assert refused.json()["error"]["param"] == param


async def test_a_name_that_rebinds_to_loopback_never_reaches_it(
        tools_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: `rebind.test` answers a public address first and 127.0.0.1 after. The
    check and the connection must see the same answer: one resolution, the vetted address."""
    from proxy.core.mcp import McpServer
    from proxy.services.tools.mcpclient import McpClient, McpFailure

    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("rebind.test", b"rebind.test"):  # anyio asks in IDNA bytes
            return real(host, port, *args, **kwargs)
        asked.append("rebind.test")
        address = "93.184.216.34" if len(asked) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    client = McpClient(connect_timeout=1, call_timeout=3)
    server = McpServer("x", f"http://rebind.test:{tools_server.port}/mcp")
    with pytest.raises(McpFailure):
        await client.list_tools(server)  # the vetted public address: unreachable from here
    assert asked == ["rebind.test"]


async def test_an_injected_resolver_decides_where_the_client_connects(
        tools_server: ServerProcess) -> None:
    from proxy.core.mcp import McpServer
    from proxy.services.tools.mcpclient import McpClient, McpFailure

    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    client = McpClient(connect_timeout=1, call_timeout=3, resolve=resolve)
    named = McpServer("x", f"http://localhost:{tools_server.port}/mcp", private_ok=True)
    assert "add" in [t["name"] for t in await client.list_tools(named)]
    with pytest.raises(McpFailure) as info:  # a name the operator did not name: refused
        await client.list_tools(McpServer("x", f"http://tools.test:{tools_server.port}/mcp"))
    assert info.value.error["code"] == 403 and "private address" in info.value.message
    assert asked == ["localhost", "tools.test"]
