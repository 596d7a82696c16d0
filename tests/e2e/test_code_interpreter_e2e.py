"""code_interpreter served by an operator's MCP server: `--code-interpreter-mcp
URL` names a real MCP server (tests/support/mcp_server.py, its `run_code` tool), the simulator
calls the code function (`call=code_interpreter`), real proxy processes, the official SDK as the
client, every streamed event validated against the SDK's types (check_stream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response
from websockets.sync.client import connect

from tests.support import servers
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_mcp_server, start_proxy

pytestmark = pytest.mark.e2e

KEY = "sk-test"
AUTH = {"authorization": f"Bearer {KEY}"}
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
OUTPUTS = "code_interpreter_call.outputs"


def run(code: str) -> str:
    return f'compute it [[sim call=code_interpreter call_args={{"code":"{code}"}}]]'


@pytest.fixture(scope="module")
def code_server() -> Iterator[ServerProcess]:
    server = start_mcp_server()
    yield server
    server.stop(timeout=2)


@pytest.fixture(scope="module")
def code_proxy(simulator: ServerProcess, code_server: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--mcp-allow", "http://127.0.0.1",
                         "--code-interpreter-mcp", f"{code_server.url}/mcp")
    yield server
    server.stop()


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def check_call(response: Response, code: str, outputs: list[dict[str, Any]] | None,
               status: str = "completed") -> None:
    assert response.status == "completed", response.error
    assert [item.type for item in response.output] == ["code_interpreter_call", "message"]
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.id.startswith("ci_")
    assert (call.status, call.code, call.container_id) == (status, code, "cntr_mcp")
    assert ([o.model_dump() for o in call.outputs] if call.outputs is not None else None) == \
        outputs


def test_not_streamed_outputs_only_when_included(code_proxy: ServerProcess) -> None:
    client = sdk(code_proxy)
    plain = client.responses.create(model="sim-model", input=run("print(6*7)"), tools=[TOOL])
    check_call(plain, "print(6*7)", None)
    assert plain.tools[0].type == "code_interpreter"
    # The model read what the code printed (the simulator's summary of the tool's answer).
    assert "42" in plain.output_text
    included = client.responses.create(model="sim-model", input=run("print(6*7)"),
                                       tools=[TOOL], include=[OUTPUTS])
    check_call(included, "print(6*7)", [{"type": "logs", "logs": "42\n"}])
    raw = httpx.post(code_proxy.url + "/v1/responses", headers=AUTH, timeout=30, json={
        "model": "sim-model", "input": run("print(2+3)"), "tools": [TOOL],
        "include": [OUTPUTS]})
    assert raw.status_code == 200
    assert "x-proxy-dropped-tools" not in raw.headers
    Response.model_validate(raw.json(), strict=True)


def test_streamed_every_event_valid(code_proxy: ServerProcess) -> None:
    events = [e.to_dict() for e in sdk(code_proxy).responses.create(
        model="sim-model", input=run("print(1+1)"), tools=[TOOL], include=[OUTPUTS],
        stream=True)]
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert kinds.index("response.code_interpreter_call.in_progress") < \
        kinds.index("response.code_interpreter_call_code.delta") < \
        kinds.index("response.code_interpreter_call_code.done") < \
        kinds.index("response.code_interpreter_call.interpreting") < \
        kinds.index("response.code_interpreter_call.completed") < \
        kinds.index("response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.code_interpreter_call_code.done")
    assert done["code"] == "print(1+1)"
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "code_interpreter_call"
    assert added["item"]["status"] == "in_progress"
    check_call(Response.model_validate(events[-1]["response"]), "print(1+1)",
               [{"type": "logs", "logs": "2\n"}])


def test_code_that_fails_is_a_failed_call(code_proxy: ServerProcess) -> None:
    """The server's tool refused the code: the item says `failed`, its logs say why (with the
    include), and the model is told and still answers."""
    response = sdk(code_proxy).responses.create(model="sim-model", input=run("import(os)"),
                                                tools=[TOOL], include=[OUTPUTS])
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.outputs is not None
    logs = call.outputs[0]
    assert logs.type == "logs" and "run_code" in logs.logs  # the server's own words
    check_call(response, "import(os)", [logs.model_dump()], status="failed")


def test_stored_and_replayed(code_proxy: ServerProcess) -> None:
    client = sdk(code_proxy)
    made = client.responses.create(model="sim-model", input=run("print(7%4)"), tools=[TOOL],
                                   include=[OUTPUTS])
    got = client.responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump()
    rebuilt = [e.to_dict() for e in client.responses.retrieve(made.id, stream=True)]
    check_stream(rebuilt)
    kinds = [e["type"] for e in rebuilt]
    for kind in ("response.code_interpreter_call.in_progress",
                 "response.code_interpreter_call_code.delta",
                 "response.code_interpreter_call_code.done",
                 "response.code_interpreter_call.interpreting",
                 "response.code_interpreter_call.completed"):
        assert kind in kinds, kind
    assert rebuilt[-1]["response"]["output"] == made.model_dump(exclude_unset=True)["output"]
    live = [e.to_dict() for e in client.responses.create(
        model="sim-model", input=run("print(7%4)"), tools=[TOOL], stream=True)]
    replayed = [e.to_dict() for e in client.responses.retrieve(
        live[0]["response"]["id"], stream=True)]
    assert replayed == live
    # A stateless client sends the call back as input: taken as history, not refused.
    history = [{"role": "user", "content": "compute it"},
               *[item.model_dump(exclude_none=True) for item in made.output],
               {"role": "user", "content": "thanks"}]
    follow = client.responses.create(model="sim-model", input=history, store=False)
    assert follow.status == "completed" and follow.output_text == "You said: thanks"


def test_background_runs_the_code_with_the_workers_server(code_proxy: ServerProcess) -> None:
    """The job's spec names the kind and the include, never the server: the worker runs the
    call with its own `--code-interpreter-mcp`."""
    made = sdk(code_proxy).responses.create(model="sim-model", input=run("print(9//2)"),
                                            tools=[TOOL], include=[OUTPUTS], background=True)
    body = servers.wait_status(code_proxy, made.id, {"completed", "failed"}, 30, headers=AUTH)
    check_call(Response.model_validate(body), "print(9//2)", [{"type": "logs", "logs": "4\n"}])
    events = [e.to_dict() for e in sdk(code_proxy).responses.retrieve(made.id, stream=True)]
    check_stream(events)
    assert "response.code_interpreter_call.interpreting" in [e["type"] for e in events]


def test_websocket_mode(code_proxy: ServerProcess) -> None:
    url = code_proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers=AUTH, open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": run("print(3*3)"), "tools": [TOOL]}))
        events: list[dict[str, Any]] = []
        while len(events) < 200 and (not events or events[-1]["type"] not in (
                "response.completed", "response.failed", "error")):
            events.append(json.loads(ws.recv(timeout=20)))
    check_stream(events)
    check_call(Response.model_validate(events[-1]["response"]), "print(3*3)", None)


def test_without_the_flag_it_stays_a_hosted_tool(simulator: ServerProcess) -> None:
    """No `--code-interpreter-mcp`: today's `--hosted-tools` rule (drop, named in a header)."""
    server = start_proxy(simulator.url)
    try:
        dropped = httpx.post(server.url + "/v1/responses", headers=AUTH, timeout=30, json={
            "model": "sim-model", "input": "hi", "tools": [TOOL]})
        assert dropped.status_code == 200
        assert dropped.headers["x-proxy-dropped-tools"] == "code_interpreter"
        assert [item["type"] for item in dropped.json()["output"]] == ["message"]
    finally:
        server.stop()
