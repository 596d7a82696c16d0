"""Tool search, added tools and the late-2026 small items (reasoning context, effort max,
refusals), their pure parts: parsing (deferred tools, `tool_search`, the refused types),
translation (what the model is offered, turn by turn), the ranking, and the items through the
assembler (live, picked up from a log, replayed from the final object), every event checked
against the SDK's types."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from proxy.core.errors import InvalidRequest
from proxy.core.events.assembler import Assembler
from proxy.core.events.replay import events_from_response
from proxy.core.ids import counter_ids
from proxy.core.request.create import MAX_TOOLS, parse_request
from proxy.core.tools import toolsearch
from proxy.core.translate.chat import to_chat_request
from proxy.services.generation.toolloop import LoopPlan
from tests.support.assembly import CREATED_AT, base_response
from tests.support.conformance import check_stream

ITEM = TypeAdapter(ResponseItem)


def deferred_tools(count: int = 200) -> list[dict[str, Any]]:
    """`count` deferred tools: one about the weather, a namespace of CRM lookups, the rest
    about inventory."""
    tools: list[dict[str, Any]] = [{
        "type": "function", "name": "get_weather_forecast", "defer_loading": True,
        "description": "The weather forecast for a city, day by day.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}]
    tools.append({"type": "namespace", "name": "crm", "description": "Customer records.",
                  "tools": [{"type": "function", "name": f"lookup_customer_{i}",
                             "defer_loading": True,
                             "description": f"Look up customer account {i} by email."}
                            for i in range(20)]})
    tools += [{"type": "function", "name": f"inventory_count_{i}", "defer_loading": True,
               "description": f"Count the stock of warehouse {i}.",
               "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}}}
              for i in range(count - 21)]
    return tools


def parse(**body: Any) -> Any:
    return parse_request({"model": "m", "input": "hi", **body}, counter_ids())


def refused(body: dict[str, Any], param: str, fragment: str = "") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_request({"model": "m", "input": "hi", **body}, counter_ids())
    assert info.value.status == 400
    assert info.value.param == param, info.value.message
    assert fragment in info.value.message, info.value.message
    return info.value


def offered(chat: dict[str, Any]) -> list[str]:
    return [f["function"]["name"] for f in chat.get("tools") or ()]


# -- parsing -----------------------------------------------------------------------------------
def test_deferred_tools_need_a_tool_search_tool() -> None:
    refused({"tools": deferred_tools(3)}, "tools", "'get_weather_forecast'")
    refused({"tools": [{"type": "function", "name": "f"}], "input": [
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "function", "name": "late", "defer_loading": True}]}]},
        "input[0].tools", "'late'")


def test_deferred_tools_do_not_count_against_the_tool_limit() -> None:
    request = parse(tools=[*deferred_tools(MAX_TOOLS + 72), {"type": "tool_search"}])
    assert len(request.tools) == 182  # 200 tools in 181 entries, and the search
    too_many = [{"type": "function", "name": f"f{i}"} for i in range(MAX_TOOLS + 1)]
    refused({"tools": too_many}, "tools", "too many tools")
    many = [{"type": "function", "name": f"d{i}", "defer_loading": True}
            for i in range(toolsearch.MAX_DEFERRED + 1)]
    refused({"tools": [*many, {"type": "tool_search"}]}, "tools", "defer_loading")


def test_the_tool_search_tool_is_echoed_with_its_execution() -> None:
    request = parse(tools=[*deferred_tools(3), {"type": "tool_search"}])
    assert request.tools[-1] == {"type": "tool_search", "execution": "server"}
    assert request.tools[0]["defer_loading"] is True
    assert request.dropped_tools == ()
    refused({"tools": [{"type": "tool_search", "execution": "elsewhere"}]},
            "tools[0].execution")
    refused({"tools": [{"type": "tool_search"}, {"type": "tool_search"}]}, "tools[1].type")


@pytest.mark.parametrize(("body", "param", "fragment"), [
    ({"tools": [{"type": "programmatic_tool_calling"}]}, "tools[0].type",
     "programmatic tool calling (model-written programs"),
    ({"tools": [{"type": "function", "name": "f", "allowed_callers": ["programmatic"]}]},
     "tools[0].allowed_callers[0]", "Programmatic"),
    ({"tools": [{"type": "function", "name": "f", "async": True}]}, "tools[0].async", "async"),
    ({"input": [{"type": "configuration_update", "id": "cu_1",
                 "reasoning": {"effort": "low"}}]}, "input[0].type",
     "send `reasoning` and `text` on each request"),
    ({"input": [{"type": "program", "id": "p", "call_id": "c", "code": "1",
                 "fingerprint": "x"}]}, "input[0].type", "programmatic tool calling is not"),
    ({"input": [{"type": "program_output", "id": "p", "call_id": "c", "result": "1",
                 "status": "completed"}]}, "input[0].type", "programmatic tool calling is not"),
    ({"reasoning": {"context": "yesterday"}}, "reasoning.context", "'current_turn'"),
])
def test_late_2026_features_not_served_are_refused_by_name(
        body: dict[str, Any], param: str, fragment: str) -> None:
    refused(body, param, fragment)


def test_reasoning_context_and_effort_max_are_echoed() -> None:
    assert parse(reasoning={"effort": "max"}).echo()["reasoning"]["effort"] == "max"
    for asked, used in (("auto", "all_turns"), ("current_turn", "current_turn"),
                        ("all_turns", "all_turns")):
        reasoning = parse(reasoning={"context": asked}).echo()["reasoning"]
        assert reasoning["context"] == used
    assert "context" not in parse(reasoning={"effort": "low"}).echo()["reasoning"]


# -- translation -------------------------------------------------------------------------------
def test_only_the_search_function_and_undeferred_tools_reach_the_model() -> None:
    request = parse(tools=[{"type": "function", "name": "always"}, *deferred_tools(),
                           {"type": "tool_search"}])
    chat = to_chat_request(request, [])
    assert offered(chat) == ["always", "tool_search"]
    assert "200 more tools" in chat["tools"][1]["function"]["description"]


def test_a_forced_deferred_tool_is_offered() -> None:
    for choice, flat in (({"type": "function", "name": "get_weather_forecast"},
                          "get_weather_forecast"),
                         ({"type": "function", "name": "lookup_customer_2", "namespace": "crm"},
                          "crm__lookup_customer_2")):
        request = parse(tools=[*deferred_tools(3), {"type": "tool_search"}], tool_choice=choice)
        chat = to_chat_request(request, [])
        assert offered(chat) == ["tool_search", flat]
        assert chat["tool_choice"] == {"type": "function", "function": {"name": flat}}


def test_allowed_tools_may_name_the_search() -> None:
    request = parse(tools=[{"type": "function", "name": "always"}, *deferred_tools(3),
                           {"type": "tool_search"}],
                    tool_choice={"type": "allowed_tools", "mode": "required",
                                 "tools": [{"type": "tool_search"}]})
    chat = to_chat_request(request, [])
    assert offered(chat) == ["tool_search"] and chat["tool_choice"] == "required"


def test_a_search_output_in_the_history_loads_its_tools_for_later_turns() -> None:
    request = parse(tools=[*deferred_tools(), {"type": "tool_search"}])
    found = toolsearch.definitions(toolsearch.rank("lookup customer 3",
                                                   toolsearch.catalogue(request.tools)))
    assert found[0]["name"] == "crm" and found[0]["tools"][0]["name"] == "lookup_customer_3"
    history = [
        toolsearch.call_item("tsc_1", "call_1", '{"query": "customer 3"}', "server",
                             "completed"),
        toolsearch.output_item("tso_1", "call_1", found)]
    chat = to_chat_request(request, history)
    names = offered(chat)
    assert names[0] == "tool_search" and "crm__lookup_customer_3" in names
    assert not any(n.startswith("inventory") for n in names)
    call, answer = chat["messages"][-3:-1]
    assert call["tool_calls"][0]["function"] == {"name": "tool_search",
                                                 "arguments": '{"query":"customer 3"}'}
    assert answer["role"] == "tool" and "crm.lookup_customer_3" in answer["content"]


def test_a_client_search_offers_its_own_function_and_its_output_loads() -> None:
    search = {"type": "tool_search", "execution": "client", "description": "Find tools.",
              "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}}}
    request = parse(tools=[search], input=[
        {"type": "tool_search_output", "execution": "client", "call_id": "call_7",
         "tools": [{"type": "function", "name": "client_tool"}]},
        {"role": "user", "content": "go"}])
    history = [toolsearch.call_item("tsc_1", "call_7", '{"goal": "x"}', "client", "completed")]
    chat = to_chat_request(request, history)
    assert offered(chat) == ["tool_search", "client_tool"]
    assert chat["tools"][0]["function"]["description"] == "Find tools."
    assert chat["tools"][0]["function"]["parameters"] == search["parameters"]


def test_a_search_output_answering_no_call_loads_without_a_message() -> None:
    request = parse(tools=[{"type": "tool_search", "execution": "client"}], input=[
        {"type": "tool_search_output", "tools": [{"type": "function", "name": "t"}]},
        {"role": "user", "content": "go"}])
    chat = to_chat_request(request, [])
    assert [m["role"] for m in chat["messages"]] == ["user"]
    assert "t" in offered(chat)


def test_additional_tools_are_offered_from_their_item_on() -> None:
    request = parse(tools=[{"type": "function", "name": "base"}], input=[
        {"role": "user", "content": "first"},
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "function", "name": "added"},
            {"type": "namespace", "name": "ns", "description": "d",
             "tools": [{"type": "function", "name": "inner"}]}]},
        {"role": "user", "content": "second"}])
    assert request.input[1]["type"] == "additional_tools" and request.input[1]["id"]
    ITEM.validate_python(request.input[1], strict=True)
    chat = to_chat_request(request, [])
    assert offered(chat) == ["base", "added", "ns__inner"]
    assert [m["content"] for m in chat["messages"]] == ["first", "second"]


def test_current_turn_leaves_earlier_reasoning_out() -> None:
    def reasoning(text: str) -> dict[str, Any]:
        return {"id": f"rs_{text}", "type": "reasoning", "summary": [],
                "content": [{"type": "reasoning_text", "text": text}]}

    def said(role: str, text: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"id": f"m_{text}", "type": "message", "role": role, "status": "completed",
                "content": [{"type": kind, "text": text, "annotations": []}]}

    history = [said("user", "q1"), reasoning("old"), said("assistant", "a1"),
               said("user", "q2"), reasoning("new"), said("assistant", "a2")]
    shown = {}
    for context in ("current_turn", "all_turns", "auto"):
        chat = to_chat_request(parse(reasoning={"context": context}), history)
        shown[context] = [m.get("reasoning") for m in chat["messages"]
                          if m["role"] == "assistant"]
    # the input's user message ("hi") is the last: no reasoning after it
    assert shown["current_turn"] == [None, None]
    assert shown["all_turns"] == shown["auto"] == ["old", "new"]
    history = [said("user", "q1"), reasoning("old"), said("assistant", "a1")]
    chat = to_chat_request(parse(reasoning={"context": "current_turn"},
                                 input=[{"type": "function_call_output", "call_id": "c",
                                         "output": "x"}]),
                           [*history, said("user", "q2"), reasoning("mine"),
                            {"id": "fc", "type": "function_call", "call_id": "c",
                             "name": "f", "arguments": "{}"}])
    assert [m.get("reasoning") for m in chat["messages"] if m["role"] == "assistant"] == [
        None, "mine"]


def test_effort_max_goes_as_the_top_of_the_scale() -> None:
    assert to_chat_request(parse(reasoning={"effort": "max"}), [])["reasoning_effort"] == "xhigh"


# -- the ranking -------------------------------------------------------------------------------
def test_the_ranking_finds_by_name_description_and_parameter_names() -> None:
    entries = toolsearch.catalogue(deferred_tools())
    assert [e.tool["name"] for e in toolsearch.rank("weather", entries)] == [
        "get_weather_forecast"]
    assert [e.tool["name"] for e in toolsearch.rank("city", entries)] == [
        "get_weather_forecast"]  # a parameter's name
    assert toolsearch.rank("stock of warehouse 7", entries)[0].tool["name"] == \
        "inventory_count_7"
    assert len(toolsearch.rank("warehouse", entries)) == toolsearch.MAX_FOUND
    assert toolsearch.rank("the and for", entries) == []
    assert toolsearch.terms("getWeatherForecast HTTPServer items") == {
        "weather", "forecast", "http", "server", "item"}


def test_the_worst_search_is_bounded() -> None:
    """Every deferred tool a request may carry, each with a description far past what a
    search reads: the catalogue and a search read at most RANKED_CHARS of each."""
    long = "alpha " * 50_000  # 300 KB a tool, read only to RANKED_CHARS
    tools = [{"type": "function", "name": f"t{i}", "description": long, "defer_loading": True}
             for i in range(toolsearch.MAX_DEFERRED)]
    started = time.process_time()
    entries = toolsearch.catalogue(tools)
    found = toolsearch.rank(long, entries)
    spent = time.process_time() - started
    assert len(found) == toolsearch.MAX_FOUND
    assert spent < 5.0, spent  # ~0.1 s here; unbounded it reads 600 MB of text


# -- the assembler -----------------------------------------------------------------------------
def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def search_chunks(name: str = "tool_search") -> list[dict[str, Any]]:
    return [chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"weather"}'}}]}),
            chunk(finish="tool_calls")]


def response_with(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {**base_response(), "tools": tools}


def server_stream() -> list[dict[str, Any]]:
    """A server-run search (the loop's steps by hand), then the answer."""
    tools = [*deferred_tools(3), {"type": "tool_search", "execution": "server"}]
    assembler = Assembler(response_with(tools), ids=counter_ids(), clock=lambda: CREATED_AT)
    events = assembler.start()
    for c in search_chunks():
        events += assembler.feed(c)
    waiting = assembler.waiting
    assert waiting is not None and waiting["type"] == "tool_search_call"
    assert waiting["call_id"] == "call_9"
    found = toolsearch.definitions(toolsearch.rank(
        toolsearch.query_of(toolsearch.arguments_object(waiting["arguments"])),
        toolsearch.catalogue(tools)))
    events += assembler.search_end(found)
    assembler.next_turn()
    events += assembler.feed(chunk({"content": "Sunny."}))
    events += assembler.feed(chunk(finish="stop"))
    events += assembler.end()
    return events


def test_a_server_search_shows_its_call_and_output_items() -> None:
    events = server_stream()
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert kinds[2:6] == ["response.output_item.added", "response.output_item.done"] * 2
    assert "response.function_call_arguments.delta" not in kinds
    final = events[-1]["response"]
    Response.model_validate(final, strict=True)
    call, output, message = final["output"]
    assert call == {"id": call["id"], "type": "tool_search_call", "status": "completed",
                    "execution": "server", "call_id": "call_9",
                    "arguments": {"query": "weather"}}
    assert events[2]["item"]["status"] == "in_progress"
    assert output["type"] == "tool_search_output" and output["call_id"] == "call_9"
    assert [t["name"] for t in output["tools"]] == ["get_weather_forecast"]
    assert message["content"][0]["text"] == "Sunny."
    for item in final["output"]:
        ITEM.validate_python(item, strict=True)


def test_a_client_search_ends_with_its_call() -> None:
    tools = [{"type": "tool_search", "execution": "client"}]
    assembler = Assembler(response_with(tools), ids=counter_ids(), clock=lambda: CREATED_AT)
    events = assembler.start()
    for c in search_chunks():
        events += assembler.feed(c)
    events += assembler.end()
    check_stream(events)
    (call,) = events[-1]["response"]["output"]
    assert events[-1]["type"] == "response.completed"
    assert (call["type"], call["execution"], call["status"]) == (
        "tool_search_call", "client", "completed")


def test_the_search_function_is_renamed_when_a_client_tool_took_its_name() -> None:
    tools = [{"type": "function", "name": "tool_search", "description": None,
              "parameters": None, "strict": None}, {"type": "tool_search"}]
    assembler = Assembler(response_with(tools), ids=counter_ids(), clock=lambda: CREATED_AT)
    assert assembler.names.search == "tool_search_2"
    events = assembler.start()
    for c in search_chunks("tool_search"):  # the client's own function
        events += assembler.feed(c)
    events += assembler.end()
    assert events[-1]["response"]["output"][0]["type"] == "function_call"


def test_replay_rebuilds_the_search_items() -> None:
    live = server_stream()
    replayed = events_from_response(live[-1]["response"])
    check_stream(replayed)
    assert replayed[-1]["response"] == live[-1]["response"]


@pytest.mark.parametrize("ending", ["fail", "cancel"])
def test_a_search_picked_up_from_the_log_closes_valid(ending: str) -> None:
    live = server_stream()
    tools = live[0]["response"]["tools"]
    for cut in range(2, len(live)):
        prefix = live[:cut]
        assembler = Assembler(response_with(tools), ids=counter_ids(),
                              clock=lambda: CREATED_AT)
        assembler.restore(prefix)
        stream = prefix + (assembler.fail("stopped") if ending == "fail" else assembler.cancel())
        check_stream(stream)
        output = stream[-1]["response"]["output"]
        if cut == 5:  # the search's output added, not done: whole, as it was
            assert output[1]["type"] == "tool_search_output" and output[1]["tools"]
        if cut == 3:  # the call added, waiting for the loop
            assert output[0]["type"] == "tool_search_call"
            assert output[0]["status"] == "incomplete"
            assert output[0]["arguments"] == {"query": "weather"}


def test_a_jobs_spec_carries_what_its_search_looks_among() -> None:
    tools = deferred_tools(3)
    plan = LoopPlan((), {}, [], 4, searchable=tools)
    read = LoopPlan.from_spec(orjson.loads(orjson.dumps(plan.to_spec())))
    assert read.searchable == tools
    assert "searchable" not in LoopPlan((), {}, [], 4).to_spec()  # as an older release wrote
    assert LoopPlan.from_spec(LoopPlan((), {}, [], 4).to_spec()).searchable is None


def test_tools_known_beside_the_responses_add_up() -> None:
    """Tools an item brought stay named after a search loaded more (the tool loop's)."""
    assembler = Assembler(response_with([{"type": "tool_search"}]), ids=counter_ids(),
                          clock=lambda: CREATED_AT)
    assembler.know_tools([{"type": "namespace", "name": "files", "description": "",
                           "tools": [{"type": "function", "name": "read_file"}]}])
    assembler.know_tools([{"type": "function", "name": "found_later"}])
    events = assembler.start()
    for c in search_chunks("files__read_file"):
        events += assembler.feed(c)
    events += assembler.end()
    (called,) = events[-1]["response"]["output"]
    assert (called["name"], called["namespace"]) == ("read_file", "files")
