"""The pure parts of MCP tools (core/mcp.py) and the assembler's MCP items and events."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import mcp
from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler, Phase
from proxy.core.ids import counter_ids
from proxy.core.policy.urlpolicy import address_allowed
from proxy.core.request.create import parse_request
from proxy.core.translate.chat import to_messages
from proxy.settings import ConfigError, build_settings
from tests.support.conformance import check_stream

ALLOW = ("http://127.0.0.1", "https://tools.corp/mcp/")


def tool(**extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "server_url": "http://127.0.0.1:9/mcp",
            **extra}


def parse(tools: list[dict[str, Any]], allow: tuple[str, ...] = ALLOW) -> Any:
    return parse_request({"model": "m", "input": "x", "tools": tools}, counter_ids(),
                         mcp_allow=allow)


def refused(tools: list[dict[str, Any]], param: str, allow: tuple[str, ...] = ALLOW) -> str:
    with pytest.raises(InvalidRequest) as info:
        parse(tools, allow)
    assert info.value.param == param
    return str(info.value)


# -- the tool and the allow-list --------------------------------------------------------------
def test_without_an_allow_list_mcp_tools_are_refused_saying_how_to_enable() -> None:
    assert "--mcp-allow" in refused([tool()], "tools[0].type", allow=())


@pytest.mark.parametrize("url", [
    "http://127.0.0.1.evil.com/mcp", "https://tools.corp/mcpx", "https://tools.corp/mcp",
    "http://user@127.0.0.1/mcp", "ftp://127.0.0.1/mcp", "https://tools.corp.evil/mcp/",
    "https://tools.corp:8443/mcp/x",  # a prefix with a path means the scheme's own port
    # Dot segments and encoded separators: an HTTP client would send `/admin/secret`.
    "https://tools.corp/mcp/../admin/secret", "https://tools.corp/mcp/%2e%2e/admin",
    "https://tools.corp/mcp/%2E%2E/admin", "https://tools.corp/mcp/x%2fy",
    "https://tools.corp/mcp/.%2e/admin", "https://tools.corp/mcp/a%5c..%5cb",
    "https://tools.corp/mcp/a\\..\\b", "https://tools.corp/mcp/./x",
    "http://127.0.0.1:9/mcp/../../admin", "http://127.0.0.1%2f@x/mcp"])
def test_urls_outside_the_allow_list_are_refused(url: str) -> None:
    refused([tool(server_url=url)], "tools[0].server_url")


def test_hosts_compare_without_case_and_the_normal_form_is_what_is_called() -> None:
    server = parse([tool(server_url="https://TOOLS.corp:443/mcp/x")]).mcp[0]
    assert server.url == "https://tools.corp:443/mcp/x"


@pytest.mark.parametrize("url", ["http://127.0.0.1/mcp", "http://127.0.0.1:8123/mcp",
                                 "http://127.0.0.1:1/", "http://127.0.0.1:65535/x/y"])
def test_a_prefix_ending_in_a_colon_admits_that_host_on_any_port(url: str) -> None:
    server = parse([tool(server_url=url)], allow=("http://127.0.0.1:",)).mcp[0]
    assert server.url == url and server.private_ok
    refused([tool(server_url=url.replace("127.0.0.1", "127.0.0.2"))], "tools[0].server_url",
            allow=("http://127.0.0.1:",))
    refused([tool(server_url=url.replace("http:", "https:"))], "tools[0].server_url",
            allow=("http://127.0.0.1:",))


@pytest.mark.parametrize("name", ["Host", "host", "HOST", "Connection", "Keep-Alive",
                                  "Proxy-Connection", "Transfer-Encoding", "TE", "Trailer",
                                  "Upgrade", "Proxy-Authorization", "Content-Length"])
def test_host_and_hop_by_hop_headers_are_refused(name: str) -> None:
    message = refused([tool(headers={"X-Ok": "1", name: "evil.internal"})], "tools[0].headers")
    assert name in message


@pytest.mark.parametrize("url", ["http://127.0.0.1/mcp", "http://127.0.0.1:8123/mcp",
                                 "https://tools.corp/mcp/", "https://tools.corp/mcp/a?b=1"])
def test_urls_inside_the_allow_list_are_admitted(url: str) -> None:
    assert parse([tool(server_url=url)]).mcp[0].url == url


def test_the_echo_never_carries_headers_and_the_server_keeps_them() -> None:
    request = parse([tool(headers={"X-Key": "k1"}, authorization="tok",
                          allowed_tools=["add"], require_approval="never")])
    echo = request.tools[0]
    assert "headers" not in echo and "authorization" not in echo
    assert echo["require_approval"] == "never" and echo["allowed_tools"] == ["add"]
    server = request.mcp[0]
    assert server.headers == {"X-Key": "k1", "Authorization": "Bearer tok"}
    assert server.allowed == ("add",) and server.private_ok  # a loopback prefix, explicitly
    assert mcp.McpServer.from_spec(server.to_spec()) == server


def test_bad_mcp_tools_name_the_field() -> None:
    refused([tool(server_label="a b")], "tools[0].server_label")
    refused([tool(), tool()], "tools[1].server_label")
    refused([tool(headers={"a": 1})], "tools[0].headers.a")
    refused([tool(headers={"a": "x\r\ny: z"})], "tools[0].headers.a")
    refused([tool(require_approval="sometimes")], "tools[0].require_approval")
    refused([{"type": "mcp", "server_label": "x"}], "tools[0].server_url")


def test_private_addresses_need_an_explicit_prefix() -> None:
    named = parse([tool(server_url="https://tools.corp/mcp/")]).mcp[0]
    assert not named.private_ok
    assert address_allowed("8.8.8.8", named.private_ok)
    for private in ("10.0.0.5", "127.0.0.1", "169.254.169.254", "::1", "fd00::1", "bogus",
                    "::ffff:127.0.0.1", "0.0.0.0", "100.64.0.1"):
        assert not address_allowed(private, named.private_ok), private
    loopback = parse([tool()]).mcp[0]
    assert address_allowed("127.0.0.1", loopback.private_ok)


def test_approval_rules() -> None:
    listed = {"name": "peek", "annotations": {"readOnlyHint": True}}
    assert mcp.McpServer("a", "u", approval="always").needs_approval(listed, "peek")
    assert not mcp.McpServer("a", "u", approval="never").needs_approval(listed, "peek")
    filtered = mcp.McpServer("a", "u", approval={"never": {"tool_names": ["echo"]}})
    assert not filtered.needs_approval(None, "echo") and filtered.needs_approval(None, "add")
    read_only = mcp.McpServer("a", "u", approval={"never": {"read_only": True}})
    assert not read_only.needs_approval(listed, "peek")
    assert read_only.needs_approval({"name": "add"}, "add")


def test_upstream_names_stay_plain_unless_taken() -> None:
    names = mcp.upstream_names(["echo"], {"a": [{"name": "add"}, {"name": "echo"}],
                                          "b": [{"name": "add"}, {"name": "mul"}]})
    assert names == {"a__add": ("a", "add"), "a__echo": ("a", "echo"),
                     "b__add": ("b", "add"), "mul": ("b", "mul")}


def test_approvals_must_answer_a_request_of_the_chain() -> None:
    servers = {"calc": mcp.McpServer("calc", "u")}
    history = [{"id": "mcpr_1", "type": mcp.APPROVAL_REQUEST, "server_label": "calc",
                "name": "add", "arguments": "{}"}]
    yes = {"type": mcp.APPROVAL_RESPONSE, "approval_request_id": "mcpr_1", "approve": True}
    no = {**yes, "approve": False}
    assert mcp.approvals([yes], history, servers) == [
        mcp.Approved("mcpr_1", "calc", "add", "{}")]
    assert mcp.approvals([no], history, servers) == []
    with pytest.raises(InvalidRequest) as info:
        mcp.approvals([{**yes, "approval_request_id": "other"}], history, servers)
    assert info.value.param == "input[0].approval_request_id"
    with pytest.raises(InvalidRequest):
        mcp.approvals([yes], history, {})


def test_history_items_reach_the_model_as_tool_calls_and_results() -> None:
    items = [
        {"id": "m1", "type": "message", "role": "user", "status": "completed",
         "content": [{"type": "input_text", "text": "hi"}]},
        {"id": "l1", "type": mcp.LIST_TOOLS, "server_label": "calc", "tools": []},
        {"id": "c1", "type": mcp.CALL, "server_label": "calc", "name": "add",
         "arguments": "{}", "output": "5", "error": None},
        {"id": "c2", "type": mcp.CALL, "server_label": "calc", "name": "fail",
         "arguments": "{}", "output": None, "error": {"type": "http_error", "code": 500,
                                                      "message": "boom"}},
        {"id": "r1", "type": mcp.APPROVAL_REQUEST, "server_label": "calc", "name": "add",
         "arguments": "{}"},
        {"id": "a1", "type": mcp.APPROVAL_RESPONSE, "approval_request_id": "r1",
         "approve": False},
    ]
    messages = to_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool",
                                             "assistant", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1"]
    assert messages[1]["content"] == ""  # not null: vLLM 0.10.1 refuses it beside tool_calls
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}
    assert messages[4]["content"] == "Error: boom" and messages[4]["name"] == "fail"
    assert messages[6]["tool_call_id"] == "r1" and mcp.DENIED in messages[6]["content"]
    assert messages[6]["name"] == "add"


def test_mcp_items_are_accepted_as_input() -> None:
    request = parse_request({"model": "m", "tools": [tool()], "input": [
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},
        {"type": "mcp_call", "id": "c1", "server_label": "calc", "name": "add",
         "arguments": "{}", "output": "5"}]}, counter_ids(), mcp_allow=ALLOW)
    assert [i["type"] for i in request.input] == ["mcp_approval_response", "mcp_call"]
    with pytest.raises(InvalidRequest) as info:
        parse_request({"model": "m", "input": [{"type": "mcp_approval_response",
                                                "approval_request_id": "r", "approve": "y"}]},
                      counter_ids())
    assert info.value.param == "input[0].approve"


def test_output_is_bounded_in_bytes() -> None:
    assert mcp.bound_text("abc", 10) == "abc"
    assert mcp.bound_text("é" * 10, 5).startswith("éé") and "truncated" in mcp.bound_text(
        "é" * 10, 5)


def test_the_allow_list_flag_is_checked_at_start() -> None:
    assert build_settings({"mcp_allow": ["http://127.0.0.1"]}, {}).mcp.allow == \
        ("http://127.0.0.1",)
    assert build_settings({}, {"PROXY_MCP_ALLOW": "https://a/mcp, https://b/"}).mcp.allow == \
        ("https://a/mcp", "https://b/")
    for bad in ("*", "http://", "ftp://x/", "http://u@x/", "https://x/a/../b"):
        with pytest.raises(ConfigError) as info:
            build_settings({"mcp_allow": [bad]}, {})
        assert info.value.flag == "--mcp-allow"


# -- the assembler ----------------------------------------------------------------------------
def assembler() -> Assembler:
    base = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m",
            **parse([tool()]).echo()}
    return Assembler(base, ids=counter_ids(), clock=lambda: 2.0)


def call_chunk(name: str, args: str, index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": index, "id": f"call_{index}", "function": {"name": name,
                                                             "arguments": args}}]}}]}


FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
          "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


def test_a_loop_of_two_turns_is_one_valid_stream() -> None:
    a = assembler()
    events = a.start() + a.mcp_list_begin("calc")
    assert a.phase is Phase.TOOL and a.waiting == {"type": mcp.LIST_TOOLS, "id": "mcpl_1",
                                                   "server_label": "calc"}
    events += a.mcp_list_end([mcp.listed_tool("add", None, {}, None)], None)
    a.offer_mcp({"add": ("calc", "add", False)})
    events += a.feed(call_chunk("add", '{"a": 1}'))
    # the second call of the same turn and the finish are not read: the call waits
    events += a.feed(call_chunk("add", "{}", index=1))
    assert a.waiting is not None and a.waiting["arguments"] == '{"a": 1}'
    assert a.feed(FINISH) == [] and a.end() == []
    events += a.mcp_call_end("2", None)
    a.next_turn()
    events += a.feed({"choices": [{"index": 0, "delta": {"content": "two"}}],
                      "usage": {"prompt_tokens": 9, "completion_tokens": 1,
                                "total_tokens": 10}})
    events += a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events += a.end()
    check_stream(events)
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][1]["output"] == "2" and final["output"][1]["status"] == "completed"
    assert final["usage"]["input_tokens"] == 14  # both turns' usage


def test_usage_of_every_turn_is_summed() -> None:
    a = assembler()
    a.start()
    a.offer_mcp({"add": ("calc", "add", False)})
    a.feed(call_chunk("add", "{}"))
    a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    assert a.waiting is not None and a.turn_finished
    a.feed({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                     "total_tokens": 7}})  # after the finish: still counted
    a.mcp_call_end("ok", None)
    a.next_turn()
    a.feed({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}})
    final = a.end()[-1]["response"]
    assert (final["usage"]["input_tokens"], final["usage"]["output_tokens"]) == (14, 3)


def test_an_approval_request_ends_like_a_client_call() -> None:
    a = assembler()
    events = a.start()
    a.offer_mcp({"add": ("calc", "add", True)})
    events += a.feed(call_chunk("add", '{"a":'))
    events += a.feed(call_chunk("add", ' 1}'))
    events += a.feed(FINISH) + a.end()
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert "response.mcp_call_arguments.delta" not in kinds
    item = events[-1]["response"]["output"][0]
    assert item == {"id": "mcpr_1", "type": "mcp_approval_request", "arguments": '{"a": 1}',
                    "name": "add", "server_label": "calc"}


def test_cancel_during_a_call_closes_it_incomplete() -> None:
    a = assembler()
    events = a.start()
    a.offer_mcp({"slow": ("calc", "slow", False)})
    events += a.feed(call_chunk("slow", "{}")) + a.feed(FINISH)
    assert a.waiting is not None
    events += a.cancel()
    check_stream(events)
    assert events[-2]["item"]["status"] == "incomplete"
    assert events[-3]["type"] == "response.mcp_call.failed"


def test_a_call_restored_from_its_log_fails_cleanly() -> None:
    a = assembler()
    events = a.start()
    a.offer_mcp({"slow": ("calc", "slow", False)})
    events += a.feed(call_chunk("slow", '{"s": 1}')) + a.feed(FINISH)
    b = assembler()
    b.restore(events)
    rest = b.fail("the worker running this response stopped before it finished")
    check_stream(events + rest)
    assert rest[-1]["response"]["output"][0]["arguments"] == '{"s": 1}'


def test_an_approved_call_streams_as_if_the_model_made_it() -> None:
    a = assembler()
    events = a.start() + a.mcp_call_begin("calc", "add", '{"a": 1}', "mcpr_9")
    events += a.mcp_call_end("1", None)
    events += a.feed({"choices": [{"index": 0, "delta": {"content": "ok"},
                                   "finish_reason": "stop"}]}) + a.end()
    check_stream(events)
    call = events[-1]["response"]["output"][0]
    assert call["approval_request_id"] == "mcpr_9" and call["output"] == "1"


def test_the_loop_stops_offering_mcp_tools_once_its_bound_is_spent() -> None:
    from proxy.services.generation.toolloop import LoopPlan, ToolLoop

    server = mcp.McpServer("calc", "http://127.0.0.1/mcp", approval="never")
    plan = LoopPlan((server,), {"calc": [mcp.listed_tool("add", "Add.", {"type": "object"},
                                                         None)]}, [], max_calls=2,
                   offered=("calc",), mode="required")
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    loop = ToolLoop(plan, None, None, chat, "t")  # type: ignore[arg-type]
    a = assembler()
    loop._tools = dict(plan.listed)
    loop._offer(a)
    first = loop._request(a)
    assert [f["function"]["name"] for f in first["tools"]] == ["add"]
    assert first["tool_choice"] == "required"
    loop.calls = 1
    assert loop._request(a)["tool_choice"] == "auto"  # one call made: the model may answer
    loop.calls = 2
    spent = loop._request(a)
    assert "tools" not in spent and "tool_choice" not in spent
    assert LoopPlan.from_spec(plan.to_spec()) == plan


def test_tool_choice_decides_which_servers_are_offered() -> None:
    labels = ("a", "b")
    assert mcp.offered_by_choice("auto", labels) == (labels, "auto")
    assert mcp.offered_by_choice("required", labels) == (labels, "required")
    assert mcp.offered_by_choice("none", labels) == ((), "none")
    assert mcp.offered_by_choice({"type": "function", "name": "f"}, labels) == ((), "auto")
    allowed = {"type": "allowed_tools", "mode": "required",
               "tools": [{"type": "mcp", "server_label": "b"}, {"type": "function",
                                                                "name": "f"}]}
    assert mcp.offered_by_choice(allowed, labels) == (("b",), "required")
    request = parse_request({"model": "m", "input": "x", "tools": [tool()],
                             "tool_choice": allowed | {"tools": [{"type": "mcp",
                                                                  "server_label": "calc"}]}},
                            counter_ids(), mcp_allow=ALLOW)
    assert request.tool_choice["tools"] == [{"type": "mcp", "server_label": "calc"}]


def test_a_client_call_before_an_mcp_call_ends_the_response_after_it() -> None:
    a = assembler()
    events = a.start()
    a.offer_mcp({"add": ("calc", "add", False)})
    events += a.feed(call_chunk("client_fn", "{}", index=0))
    events += a.feed(call_chunk("add", "{}", index=1))
    events += a.feed(call_chunk("other", "{}", index=2))  # cut here: no finish_reason came
    assert a.waiting is not None and not a.turn_finished
    events += a.mcp_call_end("3", None)
    events += a.end(finish="tool_calls")  # what the tool loop does: the client answers next
    check_stream(events)
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["function_call", "mcp_call"]
