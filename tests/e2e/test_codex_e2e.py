"""A Codex-shaped client against the real proxy (docs/protocol-2026.md §2.2): the body Codex CLI
sends with a custom provider (`client_metadata`, `prompt_cache_key`, encrypted reasoning,
`reasoning.summary`, `store: false`, two developer messages, function, custom and namespace
tools, `web_search`), accepted unmodified; every event strictly valid; a namespaced and a custom
call come back under the client's names and the stateless follow-up turn (full history resent)
goes through."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

INSTRUCTIONS = "You are Codex, a coding agent. Be concise."
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "shell", "description": "Runs a shell command.",
     "strict": False,
     "parameters": {"type": "object", "properties": {
         "command": {"type": "array", "items": {"type": "string"}},
         "workdir": {"type": "string"}}, "required": ["command"],
         "additionalProperties": False}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark",
                "definition": "start: begin_patch hunk+ end_patch\nbegin_patch: \"*** Begin "
                              "Patch\" LF\n"}},
    {"type": "function", "name": "update_plan", "description": "Updates the plan.",
     "strict": False, "parameters": {"type": "object", "properties": {
         "plan": {"type": "array", "items": {"type": "string"}}}, "required": ["plan"]}},
    {"type": "web_search", "external_web_access": False},
    {"type": "namespace", "name": "mcp__deepwiki", "description": "Tools of the deepwiki MCP "
     "server.", "tools": [
        {"type": "function", "name": "ask_question", "description": "Ask about a repository.",
         "parameters": {"type": "object", "properties": {"repo": {"type": "string"},
                                                         "question": {"type": "string"}},
                        "required": ["repo", "question"]}}]},
]


def codex_body(user_text: str, *, history: list[dict[str, Any]] | None = None,
               model: str = "sim-model") -> dict[str, Any]:
    return {
        "model": model,
        "instructions": INSTRUCTIONS,
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions>sandbox: workspace-write"
                                               "</permissions>"}]},
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<environment_context>cwd: /repo"
                                               "</environment_context>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": user_text}]},
            *(history or []),
        ],
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a7c1e-5f2b-7d00-8000-00000000c0de",
        "client_metadata": {"x-codex-installation-id": "11111111-2222-3333-4444-555555555555"},
        "text": {"verbosity": "low"},
    }


@pytest.fixture
def http(proxy: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.url, timeout=30,
                      headers={"authorization": "Bearer sk-codex",
                               "accept": "text/event-stream"}) as client:
        yield client


def post(http: httpx.Client, body: dict[str, Any]) -> tuple[httpx.Response, list[Any]]:
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = data_payloads(response.content)
    check_stream(events)
    return response, events


def test_a_codex_turn_streams_unmodified(http: httpx.Client) -> None:
    response, events = post(http, codex_body("hello codex", model="sim-reasoner"))
    assert response.headers["x-proxy-dropped-tools"] == "web_search"
    assert "x-proxy-ignored-params" not in response.headers  # all of Codex's fields are known
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert final["prompt_cache_key"] == "019a7c1e-5f2b-7d00-8000-00000000c0de"
    assert [t["type"] for t in final["tools"]] == ["function", "custom", "function",
                                                   "namespace"]
    reasoning = [i for i in final["output"] if i["type"] == "reasoning"]
    assert reasoning and reasoning[0]["encrypted_content"]
    assert final["output"][-1]["type"] == "message"


def test_a_namespaced_call_and_the_stateless_follow_up(http: httpx.Client) -> None:
    _, events = post(http, codex_body("ask mcp__deepwiki__ask_question about the repo"))
    call = events[-1]["response"]["output"][-1]
    assert call["type"] == "function_call"
    assert (call["name"], call["namespace"]) == ("ask_question", "mcp__deepwiki")
    # Codex keeps no server state: the next turn resends the call and its output.
    history = [{"type": "function_call", "call_id": call["call_id"], "name": call["name"],
                "namespace": call["namespace"], "arguments": call["arguments"]},
               {"type": "function_call_output", "call_id": call["call_id"],
                "output": "the repo is a proxy"}]
    _, events = post(http, codex_body("ask mcp__deepwiki__ask_question about the repo",
                                      history=history))
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"][-1]["type"] == "message"


def test_a_custom_tool_call_and_its_output(http: httpx.Client) -> None:
    _, events = post(http, codex_body("please apply_patch now"))
    call = events[-1]["response"]["output"][-1]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
    assert isinstance(call["input"], str) and call["input"]
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert [d["input"] for d in done] == [call["input"]]
    history = [{"type": "custom_tool_call", "call_id": call["call_id"], "name": "apply_patch",
                "input": call["input"]},
               {"type": "custom_tool_call_output", "call_id": call["call_id"],
                "output": "Success. Updated the following files: M a.py"}]
    _, events = post(http, codex_body("please apply_patch now", history=history))
    assert events[-1]["response"]["output"][-1]["type"] == "message"


def test_the_sdk_reads_a_codex_shaped_stream(proxy: ServerProcess) -> None:
    body = codex_body("please apply_patch now")
    extra = {k: body.pop(k) for k in ("client_metadata", "tools")}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-codex", max_retries=0) as sdk:
        events = [e.to_dict() for e in sdk.responses.create(**body, extra_body=extra)]
        check_stream(events)
        item = events[-1]["response"]["output"][-1]
        assert item["type"] == "custom_tool_call"
        # The stream helper accumulates the events into its own final Response.
        body.pop("stream")
        with sdk.responses.stream(**body, extra_body=extra) as stream:
            for _ in stream:
                pass
            final = stream.get_final_response()
        assert final.output[-1].type == "custom_tool_call"
        assert final.output[-1].input == item["input"]
        namespaced = sdk.responses.create(**{**body, "input": codex_body(
            "ask mcp__deepwiki__ask_question")["input"]}, extra_body=extra)
        call = namespaced.output[-1]
        assert call.type == "function_call" and call.namespace == "mcp__deepwiki"
        assert json.loads(call.arguments)
